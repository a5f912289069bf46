"""``sweep``: evaluate whatever the policy offers, in order, in batches of k.

What the built-in policy needs: its seeds' configurations are a grid to measure.
"""

from __future__ import annotations

from ..state import Node, Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams


class SweepStrategy:
    name = "sweep"

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        self.state, self.proposer, self.params = state, proposer, params
        self.exhausted = False

    def propose(self, n: int) -> list[Proposal]:
        out = self.proposer.propose(self.state, [Ask()] * max(0, min(n, max(self.params.k, 8))))
        self.exhausted = not out
        return out

    def update(self, nodes: list[Node]) -> None:
        pass

    def best(self) -> Node | None:
        return self.state.best

    def should_stop(self) -> str | None:
        return "the policy has no more candidates" if self.exhausted else None
