"""``StepStrategy``: the scaffolding the built-in strategies share.

A round asks the policy for ``_asks(n)`` (none: the round is empty, and ``_stop_reason``
says why); an empty answer ends the search ("the policy has no more candidates"), otherwise ``_keep`` picks what is sent and a round that sends anything
is a step, up to ``params.depth``. ``_stop_reason`` adds a strategy's own reason to stop.
Plugins need not use it: the loop only needs the ``Strategy`` protocol.
"""

from __future__ import annotations

from ..state import Node, Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams

NO_MORE = "the policy has no more candidates"


class StepStrategy:
    """Rounds of asks, counted as steps; ``best()`` is ``state.best`` and ``update`` does nothing."""

    name: str

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        self.state, self.proposer, self.params = state, proposer, params
        self.steps = 0
        self.exhausted = False

    def _asks(self, n: int) -> list[Ask]:
        """What to ask the policy for this round (n > 0 is the room left)."""
        raise NotImplementedError

    def _keep(self, asked: list[Proposal], n: int) -> list[Proposal]:
        """Which of the (non-empty) answers to send, at most n."""
        return asked[:n]

    def _stop_reason(self) -> str | None:
        """A reason of the strategy's own to stop, checked before the depth."""
        return None

    def propose(self, n: int) -> list[Proposal]:
        if n <= 0 or self.should_stop():
            return []
        asks = self._asks(n)
        if not asks:  # nothing fits this round: ``_stop_reason`` says why, the policy is not to blame
            return []
        asked = self.proposer.propose(self.state, asks)
        self.exhausted = not asked
        if not asked:
            return []
        out = self._keep(asked, n)
        self.steps += bool(out)
        return out

    def update(self, nodes: list[Node]) -> None:
        pass

    def best(self) -> Node | None:
        return self.state.best

    def should_stop(self) -> str | None:
        if self.exhausted:
            return NO_MORE
        why = self._stop_reason()
        if why:
            return why
        depth = self.params.depth
        if depth is not None and self.steps >= depth:
            return f"depth of {depth} step{'s' if depth != 1 else ''} reached"
        return None
