"""The search state: the reference, the workloads, the tree of attempts, the best-so-far.

Every attempt is a ``Node`` with its parent, so any strategy's run is a tree; the
trajectory is the nodes in the order they were evaluated. ``Node`` and ``Proposal`` are
plain records in ``model.search`` (the critics and value models read them too); they are
importable from here as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.search import Node, Proposal
from ..oracle.verdict import Verdict
from .reward import reward

__all__ = ["Node", "Proposal", "SearchState", "rank"]  # Node and Proposal live in model.search


@dataclass
class SearchState:
    target_id: str
    reference_source: str = ""
    workloads: list[dict[str, Any]] = field(default_factory=list)
    trajectory: list[Node] = field(default_factory=list)
    best: Node | None = None
    baseline_s: float | None = None  # the reference's median time, once an evaluation measured it

    def add(self, proposal: Proposal, verdict: Verdict, step: int) -> Node:
        parent = proposal.parent
        node = Node(len(self.trajectory), proposal, verdict, reward(verdict), parent.depth + 1 if parent else 0, step)
        self.trajectory.append(node)
        if self.best is None or rank(node) > rank(self.best):
            self.best = node
        if verdict.reference_s and self.baseline_s is None:
            self.baseline_s = verdict.reference_s
        return node


def rank(node: Node) -> tuple[int, float]:
    """Faster and trustworthy first, then correct, then failures by reward tier; among the
    correct, by the candidate's own time.

    Not its speedup: every evaluation times the reference in its own process, and an eager
    reference's time can differ several-fold between processes (allocator state), while a
    candidate's own median is what the same workloads cost it.
    """
    v = node.verdict
    own = -(v.candidate_s if v.candidate_s else float("inf"))
    if v.status == "faster" and not v.weak_check:
        return (2, own)
    if v.correct:
        return (1, own)
    return (0, node.reward)
