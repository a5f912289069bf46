"""``refine``: sequential refinement, compile -> validate -> profile ("CUDA-LLM").

One lineage at a time: a failed round gets a fix-up turn on the failure with its feedback
and the trajectory (at most two in a row); otherwise the fastest valid candidate so far is
improved. This is the feedback loop most kernel-generation papers report.
"""

from __future__ import annotations

from ..state import Node, SearchState, rank
from ..strategy import Ask, Proposer, StrategyParams
from .base import StepStrategy

#: failures worth a fix-up turn: there is code, and it did not cheat the harness
FIXABLE = ("compile_error", "runtime_error", "crash", "timeout", "wrong")
MAX_FIXUPS = 2


class RefineStrategy(StepStrategy):
    """Round 0 starts from the reference; then fix the latest failure or improve the best."""

    name = "refine"

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        super().initialize(state, proposer, params)
        self.last: list[Node] = []  # the latest round's nodes
        self.fixups = 0  # consecutive fix-up rounds of the current lineage

    def _next_ask(self) -> Ask:
        if self.steps and not any(x.verdict.correct for x in self.last):
            fixable = [x for x in self.last if x.verdict.status in FIXABLE]
            if fixable and self.fixups < MAX_FIXUPS:
                # the most promising failure of the round (the latest one on ties)
                failed = max(reversed(fixable), key=rank)
                self.fixups += 1
                return Ask(parent=failed, mode="fix", observation="feedback+trajectory")
        self.fixups = 0
        best = self.state.best
        if best is not None and best.verdict.correct:
            return Ask(parent=best, mode="improve")
        return Ask()  # nothing correct yet and no fix-up left: start again from the reference

    def _asks(self, n: int) -> list[Ask]:
        return [self._next_ask()] * min(n, self.params.k)

    def update(self, nodes: list[Node]) -> None:
        self.last = list(nodes)
