"""``beam``: beam search over the tree of attempts.

Step 0 samples k candidates from the reference; every later step keeps the top w nodes so
far (by ``rank``) and expands each with k // w children: improvements of the correct ones,
fix-ups of the failed ones. Wider than refinement, narrower than best-of-N.
"""

from __future__ import annotations

from ..state import Node, rank
from ..strategy import Ask
from .base import StepStrategy

#: nothing to build on: no code (format) or code that cheated the harness (rejected)
UNBUILDABLE = ("format", "rejected")


class BeamStrategy(StepStrategy):
    """Width ``params.width``; ``max(1, k // w)`` children per beam node and step (so more
    than k when w > k), capped at n."""

    name = "beam"

    def beam(self) -> list[Node]:
        """The top-w nodes so far by ``rank`` (the earliest on ties), buildable ones only."""
        pool = [x for x in self.state.trajectory if x.verdict.status not in UNBUILDABLE]
        return sorted(pool, key=rank, reverse=True)[: max(1, self.params.width)]

    def _asks(self, n: int) -> list[Ask]:
        k = self.params.k
        beam = self.beam() if self.steps else []
        if not beam:  # step 0, or nothing yet worth building on: sample the reference
            return [Ask()] * min(n, k)
        per = max(1, k // max(1, self.params.width))
        total = min(n, per * len(beam))
        # share a short budget out from the top of the beam, keeping each node's asks together
        counts = [total // len(beam) + (i < total % len(beam)) for i in range(len(beam))]
        asks: list[Ask] = []
        for node, c in zip(beam, counts):
            mode = "improve" if node.verdict.correct else "fix"
            asks += [Ask(parent=node, mode=mode)] * c
        return asks
