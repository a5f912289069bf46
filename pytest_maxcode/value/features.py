"""Node features a light model can learn reward-to-go from.

Code features are the techniques the field reports as what makes kernels fast (tiling,
shared memory, vectorized access, fusion, unrolling, threads); the rest is where the node
sits in its search (parent's reward, depth), what the critic said of its parent, and the
language.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..model.techniques import PATTERNS

TECHNIQUES = PATTERNS  # names are the features' names: saved models depend on them
CRITIQUE_CLASSES = ("format", "compile", "runtime", "rejected", "wrong", "correct")
LANGS = ("cpp", "cuda", "py")

FEATURE_NAMES: list[str] = (
    [f"code_{t}" for t in TECHNIQUES]
    + ["code_loops", "code_lines", "parent_reward", "has_parent", "depth"]
    + [f"parent_critique_{c}" for c in CRITIQUE_CLASSES]
    + [f"lang_{lang}" for lang in LANGS]
)


def code_features(code: str) -> dict[str, float]:
    out = {f"code_{t}": float(bool(p.search(code))) for t, p in TECHNIQUES.items()}
    # fewer loops over the data for the same work is what fusion means
    out["code_loops"] = float(len(re.findall(r"\bfor\s*\(", code)))
    out["code_lines"] = float(code.count("\n") + 1) if code else 0.0
    return out


def node_features(node: Mapping[str, Any], code: str | None, parent: Mapping[str, Any] | None, lang: str | None) -> list[float]:
    """The feature vector, in ``FEATURE_NAMES`` order, for one node."""
    f = code_features(code or "")
    f["parent_reward"] = float(parent["reward"]) if parent is not None else 0.0
    f["has_parent"] = float(parent is not None)
    f["depth"] = float(node.get("depth") or 0)
    critique = str((parent or {}).get("critique") or "")
    kind = critique[1:].split(":", 1)[0] if critique.startswith("[") else ""
    for c in CRITIQUE_CLASSES:
        f[f"parent_critique_{c}"] = float(kind == c)
    for language in LANGS:
        f[f"lang_{language}"] = float(lang == language)
    return [f[name] for name in FEATURE_NAMES]
