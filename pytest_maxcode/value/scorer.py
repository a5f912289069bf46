"""Scoring proposals by predicted reward-to-go, so the ``maxcode`` strategy sends only the
top m of its k proposals to the oracle: ``--maxcode-rerank=light`` (the trained light model)
or ``--maxcode-rerank=llm`` (a generative model, e.g. one fine-tuned on ``maxcode value
export`` and served behind an OpenAI-compatible endpoint)."""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..llm import LLMRequest, LLMService, LLMUnavailable, Message
from ..model.budget import CallBudget, Reservation
from ..model.search import Proposal
from .features import node_features
from .model import MODEL_FILE, load, reward_prompt


class TopM:
    """The top m by score; replies without code never make the cut. With no more usable
    proposals than it keeps, nothing is scored: every one is sent, in the order asked."""

    name = "top-m"
    top = 1
    budget: CallBudget | None = None

    def scores(self, proposals: list[Proposal]) -> list[float]:
        raise NotImplementedError

    def __call__(self, proposals: list[Proposal]) -> list[Proposal]:
        usable = [p for p in proposals if p.spec is not None]
        if len(usable) <= self.top:
            return usable
        ranked = sorted(zip(self.scores(usable), range(len(usable))), key=lambda t: (-t[0], t[1]))
        return [usable[i] for _, i in ranked[: self.top]]

    def asks(self, k: int, n: int) -> int:
        """How many of a step's k proposals to ask for when n may be evaluated: what the
        budget has room for (the proposals' requests, the scoring, the critiques of the top
        m), or without a budget to plan with, no more than n (each then fits the room the
        loop counted for an evaluated proposal)."""
        if self.budget is None:
            return min(k, n)
        a = self.budget.asks(k, self.top)
        return min(a, n) if min(a, self.top) > n else a


def _parent_row(p: Proposal) -> dict[str, str | float | None] | None:
    parent = p.parent
    if parent is None:
        return None
    return {"reward": parent.reward, "critique": parent.critique, "status": parent.verdict.status}


class LightScorer(TopM):
    name = "light"

    def __init__(self, value_dir: Path, top: int, budget: CallBudget | None = None) -> None:
        self.model, self.gamma = load(value_dir / MODEL_FILE)
        self.top = max(1, top)
        self.budget = budget  # only to plan steps with: the light model makes no LLM calls

    def scores(self, proposals: list[Proposal]) -> list[float]:
        rows = []
        for p in proposals:
            node = {"depth": p.parent.depth + 1 if p.parent is not None else 0}
            code = p.spec.text if p.spec is not None else None
            rows.append(node_features(node, code, _parent_row(p), p.spec.lang if p.spec is not None else None))
        return [float(s) for s in self.model.predict(rows)] if rows else []


SYSTEM = "You predict how far a candidate kernel will get in a search for speed. Answer with one number only."
_FIRST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def parse_score(text: str) -> float:
    """The reply's first number; a reply without one ranks last."""
    m = _FIRST_NUMBER.search(text or "")
    return float(m.group(0)) if m else -math.inf


class LLMScorer(TopM):
    """Asks the scorer model the question ``maxcode value export`` trains on, once per
    proposal, concurrently; each question takes its place in the budget before it is sent,
    and a question the budget has no room for is not asked (its proposal ranks last)."""

    name = "llm"

    def __init__(self, service: LLMService, top: int, *, target_id: str, budget: CallBudget, run_id: int | None,
                 gamma: float = 0.9, concurrency: int = 4) -> None:
        """Seven parameters because the loop wires each from a setting of its own (keyword-only
        past ``top``); a record holding them would only move the list."""
        self.service = service
        self.top = max(1, top)
        self.target_id = target_id
        self.budget = budget
        self.run_id = run_id
        self.gamma = gamma
        self.concurrency = max(1, concurrency)
        self.replies: list[str] = []
        budget.spends(scored=1)

    def _score(self, p: Proposal, held: Reservation | None) -> float:
        if held is None:
            return -math.inf  # no room for the question: not asked
        with held:
            assert p.spec is not None
            depth = p.parent.depth + 1 if p.parent is not None else 0
            prompt = reward_prompt(self.target_id, depth, _parent_row(p), p.spec.lang, p.spec.text, self.gamma)
            request = LLMRequest(SYSTEM, (Message("user", prompt),), max_tokens=16, temperature=0.0)
            try:
                resp = self.service.complete(request, run_id=self.run_id, target_id=self.target_id)
            except LLMUnavailable:
                return -math.inf
            held.settle(resp)
        self.replies.append(resp.text)
        return parse_score(resp.text)

    def scores(self, proposals: list[Proposal]) -> list[float]:
        if not proposals:
            return []
        assert self.budget is not None
        held = [self.budget.reserve() for _ in proposals]  # in order: the first asked get the room
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(proposals))) as pool:
            return list(pool.map(self._score, proposals, held))
