"""Strategies: one small protocol, so search methods plug into the same loop.

The loop asks ``propose`` for a batch, sends it to the oracle's batch path, and reports
the verdicts with ``update``; ``should_stop`` says when and why to stop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from ..oracle.verdict import Verdict
from .policy import Proposal


@dataclass
class SearchState:
    """The trajectory and the best-so-far: what every strategy observes."""

    target_id: str
    trajectory: list[tuple[Proposal, Verdict]] = field(default_factory=list)
    best: tuple[Proposal, Verdict] | None = None

    def add(self, proposal: Proposal, verdict: Verdict) -> None:
        self.trajectory.append((proposal, verdict))
        if _rank(verdict) > (_rank(self.best[1]) if self.best else (-1, 0.0)):
            self.best = (proposal, verdict)


def _rank(v: Verdict) -> tuple[int, float]:
    """Faster and trustworthy first, then correct, then anything; then the candidate's own time.

    Not its speedup: every evaluation times the reference in its own process, and an eager
    reference's time can differ several-fold between processes (allocator state), while a
    candidate's own median is what the same workloads cost it.
    """
    own = -(v.candidate_s if v.candidate_s else float("inf"))
    if v.status == "faster" and not v.weak_check:
        return (2, own)
    if v.correct:
        return (1, own)
    return (0, float("-inf"))


class Strategy(Protocol):
    name: str

    def initialize(self, state: SearchState, proposals: list[Proposal]) -> None: ...

    def propose(self, n: int) -> list[Proposal]: ...

    def update(self, results: list[tuple[Proposal, Verdict]]) -> None: ...

    def should_stop(self) -> str | None: ...


class SweepStrategy:
    """Evaluate the policy's proposals in order, in batches, within the budget.

    What the built-in policy needs: its seeds' configurations are a grid to measure.
    """

    name = "sweep"

    def __init__(self, budget: int, time_limit: float | None, batch: int = 8) -> None:
        self.budget = budget
        self.time_limit = time_limit
        self.batch = batch
        self.start = time.monotonic()
        self.queue: list[Proposal] = []
        self.state: SearchState | None = None

    def initialize(self, state: SearchState, proposals: list[Proposal]) -> None:
        self.state = state
        self.queue = list(proposals)

    def propose(self, n: int) -> list[Proposal]:
        assert self.state is not None
        room = self.budget - len(self.state.trajectory)
        take, self.queue = self.queue[: max(0, min(n, room, self.batch))], self.queue[max(0, min(n, room, self.batch)) :]
        return take

    def update(self, results: list[tuple[Proposal, Verdict]]) -> None:
        assert self.state is not None
        for p, v in results:
            self.state.add(p, v)

    def should_stop(self) -> str | None:
        assert self.state is not None
        if len(self.state.trajectory) >= self.budget:
            return f"budget of {self.budget} candidates reached"
        if self.time_limit is not None and time.monotonic() - self.start >= self.time_limit:
            return f"time limit of {self.time_limit:g} s reached"
        if not self.queue:
            return "the policy has no more candidates"
        return None
