"""The search state: the reference, the workloads, the tree of attempts, the best-so-far.

Every attempt is a ``Node`` with its parent, so any strategy's run is a tree; the
trajectory is the nodes in the order they were evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..oracle.check import CandidateSpec
from ..oracle.verdict import Verdict
from .reward import reward


@dataclass
class Proposal:
    """A candidate to evaluate. ``spec`` is None when a reply had no usable code."""

    spec: CandidateSpec | None
    origin: str  # "seed:fused.cpp", "torch.compile:default", "anthropic:claude-...", ...
    params: dict[str, Any] = field(default_factory=dict)
    parent: Node | None = None
    mode: str = "initial"  # "initial" | "improve" | "fix"
    error: str | None = None  # why there is no spec (a format failure)
    llm_call_id: int | None = None
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Node:
    index: int  # position in the trajectory
    proposal: Proposal
    verdict: Verdict
    reward: float
    depth: int
    step: int
    id: int | None = None  # the store's row
    critique: str | None = None  # filled by a critic (issue 5)
    critique_flags: list[str] = field(default_factory=list)  # its claims no measured fact supports

    @property
    def parent(self) -> Node | None:
        return self.proposal.parent

    @property
    def code(self) -> str | None:
        return self.proposal.spec.text if self.proposal.spec is not None else None


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
