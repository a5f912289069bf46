"""``best-of-n``: independent samples of the reference, the field's usual baseline.

Each round asks for k fresh candidates from the reference, with no feedback from earlier
rounds: what parallel sampling (pass@k / best-of-N in KernelBench) measures.
"""

from __future__ import annotations

from ..state import Node, Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams


class BestOfNStrategy:
    """Parallel samples of the reference; the best by ``rank`` wins (``state.best``)."""

    name = "best-of-n"

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        self.state, self.proposer, self.params = state, proposer, params
        self.steps = 0
        self.exhausted = False

    def propose(self, n: int) -> list[Proposal]:
        if n <= 0 or self.should_stop():
            return []
        out = self.proposer.propose(self.state, [Ask()] * min(n, self.params.k))[:n]
        self.exhausted = not out
        self.steps += bool(out)
        return out

    def update(self, nodes: list[Node]) -> None:
        pass

    def best(self) -> Node | None:
        return self.state.best

    def should_stop(self) -> str | None:
        if self.exhausted:
            return "the policy has no more candidates"
        depth = self.params.depth
        if depth is not None and self.steps >= depth:
            return f"depth of {depth} step{'s' if depth != 1 else ''} reached"
        return None
