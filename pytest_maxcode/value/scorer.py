"""Scoring proposals with the trained reward-to-go model, so the ``maxcode`` strategy sends
only the top m of its k proposals to the oracle (``--maxcode-rerank=light``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..search.state import Proposal
from .features import node_features
from .model import MODEL_FILE, load


class LightScorer:
    name = "light"

    def __init__(self, value_dir: Path, top: int) -> None:
        self.model, self.gamma = load(value_dir / MODEL_FILE)
        self.top = max(1, top)

    def scores(self, proposals: list[Proposal]) -> list[float]:
        rows = []
        for p in proposals:
            parent = p.parent
            parent_row: dict[str, Any] | None = None
            if parent is not None:
                parent_row = {"reward": parent.reward, "critique": parent.critique}
            node = {"depth": parent.depth + 1 if parent is not None else 0}
            code = p.spec.text if p.spec is not None else None
            rows.append(node_features(node, code, parent_row, p.spec.lang if p.spec is not None else None))
        return [float(s) for s in self.model.predict(rows)] if rows else []

    def __call__(self, proposals: list[Proposal]) -> list[Proposal]:
        """The top m by predicted reward-to-go; replies without code never make the cut."""
        usable = [p for p in proposals if p.spec is not None]
        ranked = sorted(zip(self.scores(usable), range(len(usable))), key=lambda t: (-t[0], t[1]))
        return [usable[i] for _, i in ranked[: self.top]]
