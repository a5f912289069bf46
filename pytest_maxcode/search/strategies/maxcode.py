"""``maxcode``: the full max-reward search (DESIGN.md section 6).

k proposals per step for depth d, each step conditioned on the best-so-far and the
trajectory (the run's observation, by default "trajectory+best"), optionally reranked by a
reward-to-go model so that only the most promising proposals are evaluated. The objective
is the best reward reached, not the sum, so every step builds on the best candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..state import Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams
from .base import StepStrategy

Rerank = Callable[[list[Proposal]], list[Proposal]]


class PlannedRerank(Protocol):
    """A reranker that also says how many proposals a step may ask for (``value.scorer.TopM``)."""

    def __call__(self, proposals: list[Proposal]) -> list[Proposal]: ...

    def asks(self, k: int, n: int) -> int: ...


class MaxcodeStrategy(StepStrategy):
    """Each step asks k improvements of the best-so-far (or k initial candidates while
    nothing is correct). With ``rerank`` set, as many as the budget has room for (up to k,
    counting the reranker's questions and the critiques of those kept) are asked, and only
    what it returns is sent."""

    name = "maxcode"

    def __init__(self, rerank: Rerank | PlannedRerank | None = None) -> None:
        self.rerank = rerank

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        super().initialize(state, proposer, params)
        self.rejected_all = False
        self.no_room = False

    def _asks(self, n: int) -> list[Ask]:
        best = self.state.best
        if best is not None and best.verdict.correct:
            ask = Ask(parent=best, mode="improve")
        else:
            ask = Ask()
        k = self.params.k
        if self.rerank is None:
            return [ask] * min(n, k)
        plan = getattr(self.rerank, "asks", None)
        # a reranker that cannot plan gets k to choose from, as always: the policy sends no
        # more requests than the budget has places for
        a = plan(k, n) if plan is not None else k
        self.no_room = a <= 0
        return [ask] * a

    def _keep(self, asked: list[Proposal], n: int) -> list[Proposal]:
        out = asked
        if self.rerank is not None:
            out = list(self.rerank(list(asked)))
            if not out:
                self.rejected_all = True
        return out[:n]

    def _stop_reason(self) -> str | None:
        if self.no_room:
            return "no LLM-call room left for a step (its proposals, their scoring and critiques)"
        return "the value model kept none of the proposals" if self.rejected_all else None
