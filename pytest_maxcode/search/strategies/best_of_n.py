"""``best-of-n``: independent samples of the reference, the field's usual baseline.

Each round asks for k fresh candidates from the reference, with no feedback from earlier
rounds: what parallel sampling (pass@k / best-of-N in KernelBench) measures.
"""

from __future__ import annotations

from ..strategy import Ask
from .base import StepStrategy


class BestOfNStrategy(StepStrategy):
    """Parallel samples of the reference; the best by ``rank`` wins (``state.best``)."""

    name = "best-of-n"

    def _asks(self, n: int) -> list[Ask]:
        return [Ask()] * min(n, self.params.k)
