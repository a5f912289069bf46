"""The search state: the reference, the workloads, the tree of attempts, the best-so-far.

Every attempt is a ``Node`` with its parent, so any strategy's run is a tree; the
trajectory is the nodes in the order they were evaluated. One source is one node: a later
proposal of the same source (``source_key``: identical once trailing whitespace is dropped)
is recorded on the node it repeats (``Node.repeats``), so it is neither evaluated nor listed
again. A reply without code has no source: it is keyed by its error text instead, so identical
format failures are one node with a count as well. ``Node`` and ``Proposal`` are plain records
in ``model.search`` (the critics and value models read them too); they are importable from here
as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.search import Node, Proposal, source_key
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
    #: the node of each source so far, by ``sample_key``
    by_source: dict[str, Node] = field(default_factory=dict, repr=False)

    def find(self, proposal: Proposal) -> Node | None:
        """The node that already holds this proposal's source (or, for a reply without code, its
        error), if any."""
        return self.by_source.get(sample_key(proposal))

    def add(self, proposal: Proposal, verdict: Verdict, step: int) -> Node:
        """A new node for a new source; for a source already held, that node, with the proposal
        recorded as one more sample of it (``verdict`` is not read: nothing new was measured;
        a repeat that was timed again goes to ``remeasured``)."""
        held = self.find(proposal)
        if held is not None:
            held.repeats.append(proposal)
            return held
        parent = proposal.parent
        node = Node(len(self.trajectory), proposal, verdict, reward(verdict), parent.depth + 1 if parent else 0, step)
        self.trajectory.append(node)
        self.by_source[sample_key(proposal)] = node
        if self.best is None or rank(node) > rank(self.best):
            self.best = node
        self._baseline(verdict)
        return node

    def remeasured(self, node: Node, verdict: Verdict) -> None:
        """A held source timed again (its verdict was too noisy to decide): the new verdict is
        the node's, and the best-so-far is chosen again."""
        node.verdict, node.reward = verdict, reward(verdict)
        self.best = max(self.trajectory, key=rank)  # the earliest on ties, as ``add`` keeps it
        self._baseline(verdict)

    def _baseline(self, verdict: Verdict) -> None:
        if verdict.reference_s and self.baseline_s is None:
            self.baseline_s = verdict.reference_s


def sample_key(proposal: Proposal) -> str:
    """What makes two samples one node: the source (``source_key``) for code, and for a reply
    without code its error text, whitespace collapsed (the same format failure again is a
    repeat, not a new attempt worth a trajectory line)."""
    if proposal.spec is not None:
        return source_key(proposal.spec)
    return "reply-error\0" + " ".join((proposal.error or "no usable code").split())


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
