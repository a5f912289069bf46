"""``effi``: profile-guided self-optimization ("Effi-Learner").

Keeps one current candidate and asks for a revision from its execution profile; a revision
replaces it only if it ranks higher. Failed or slower revisions are discarded, never built
upon, so the search cannot drift away from its best working code.
"""

from __future__ import annotations

from ..state import Node, Proposal, SearchState, rank
from ..strategy import Ask, Proposer, StrategyParams


class EffiStrategy:
    """Initial candidates until one is correct; then revise ``current``, keeping only gains."""

    name = "effi"

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        self.state, self.proposer, self.params = state, proposer, params
        self.steps = 0
        self.exhausted = False
        self.current: Node | None = None

    def propose(self, n: int) -> list[Proposal]:
        if n <= 0 or self.should_stop():
            return []
        if self.current is None:
            ask = Ask()
        else:
            ask = Ask(parent=self.current, mode="improve", observation="feedback")
        out = self.proposer.propose(self.state, [ask] * min(n, self.params.k))[:n]
        self.exhausted = not out
        self.steps += bool(out)
        return out

    def update(self, nodes: list[Node]) -> None:
        correct = [x for x in nodes if x.verdict.correct]
        if not correct:
            return
        top = max(correct, key=rank)  # the earliest on ties
        if self.current is None or rank(top) > rank(self.current):
            self.current = top

    def best(self) -> Node | None:
        return self.current if self.current is not None else self.state.best

    def should_stop(self) -> str | None:
        if self.exhausted:
            return "the policy has no more candidates"
        depth = self.params.depth
        if depth is not None and self.steps >= depth:
            return f"depth of {depth} step{'s' if depth != 1 else ''} reached"
        return None
