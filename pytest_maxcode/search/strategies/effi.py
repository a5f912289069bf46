"""``effi``: profile-guided self-optimization ("Effi-Learner").

Keeps one current candidate and asks for a revision from its execution profile; a revision
replaces it only if it ranks higher. Failed or slower revisions are discarded, never built
upon, so the search cannot drift away from its best working code.
"""

from __future__ import annotations

from ..state import Node, SearchState, rank
from ..strategy import Ask, Proposer, StrategyParams
from .base import StepStrategy


class EffiStrategy(StepStrategy):
    """Initial candidates until one is correct; then revise ``current``, keeping only gains."""

    name = "effi"

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        super().initialize(state, proposer, params)
        self.current: Node | None = None

    def _asks(self, n: int) -> list[Ask]:
        if self.current is None:
            ask = Ask()
        else:
            ask = Ask(parent=self.current, mode="improve", observation="feedback")
        return [ask] * min(n, self.params.k)

    def update(self, nodes: list[Node]) -> None:
        correct = [x for x in nodes if x.verdict.correct]
        if not correct:
            return
        top = max(correct, key=rank)  # the earliest on ties
        if self.current is None or rank(top) > rank(self.current):
            self.current = top

    def best(self) -> Node | None:
        return self.current if self.current is not None else self.state.best
