"""``maxcode``: the full max-reward search (DESIGN.md section 6).

k proposals per step for depth d, each step conditioned on the best-so-far and the
trajectory (the run's observation, by default "trajectory+best"), optionally reranked by a
reward-to-go model so that only the most promising proposals are evaluated. The objective
is the best reward reached, not the sum, so every step builds on the best candidate.
"""

from __future__ import annotations

from collections.abc import Callable

from ..state import Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams
from .base import StepStrategy

Rerank = Callable[[list[Proposal]], list[Proposal]]


class MaxcodeStrategy(StepStrategy):
    """Each step asks k improvements of the best-so-far (or k initial candidates while
    nothing is correct). With ``rerank`` set, k are asked and only what it returns is sent."""

    name = "maxcode"

    def __init__(self, rerank: Rerank | None = None) -> None:
        self.rerank = rerank
        #: proposals asked for but not sent (filtered out by ``rerank``): their LLM calls,
        #: tokens and cost are spent all the same, so the loop may count them
        self.discarded: list[Proposal] = []

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        super().initialize(state, proposer, params)
        self.rejected_all = False
        self.discarded = []

    def _asks(self, n: int) -> list[Ask]:
        best = self.state.best
        if best is not None and best.verdict.correct:
            ask = Ask(parent=best, mode="improve")
        else:
            ask = Ask()
        k = self.params.k
        return [ask] * (k if self.rerank is not None else min(n, k))

    def _keep(self, asked: list[Proposal], n: int) -> list[Proposal]:
        out = asked
        if self.rerank is not None:
            out = list(self.rerank(list(asked)))
            if not out:
                self.rejected_all = True
        out = out[:n]
        sent = {id(p) for p in out}
        self.discarded.extend(p for p in asked if id(p) not in sent)
        return out

    def _stop_reason(self) -> str | None:
        return "the value model kept none of the proposals" if self.rejected_all else None
