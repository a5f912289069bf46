"""``sweep``: evaluate whatever the policy offers, in order, in batches of k.

What the built-in policy needs: its seeds' configurations are a grid to measure.
"""

from __future__ import annotations

from ..state import Proposal
from ..strategy import Ask
from .base import NO_MORE, StepStrategy


class SweepStrategy(StepStrategy):
    name = "sweep"

    def _asks(self, n: int) -> list[Ask]:
        return [Ask()] * max(0, min(n, max(self.params.k, 8)))

    # the whole grid, whatever the depth: rounds are not steps, and nothing stops it but the policy
    def propose(self, n: int) -> list[Proposal]:
        out = self.proposer.propose(self.state, self._asks(n))
        self.exhausted = not out
        return out

    def should_stop(self) -> str | None:
        return NO_MORE if self.exhausted else None
