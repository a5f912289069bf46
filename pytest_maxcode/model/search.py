"""The search's plain records: a proposal, an evaluated node, an ask.

The strategies and policies (``search``), the critics (``critique``) and the reward-to-go
models (``value``) all read these; keeping them here lets ``critique`` and ``value`` sit
below ``search`` instead of importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module imports nothing from the package at run time
    from ..oracle.check import CandidateSpec
    from .verdict import Verdict

#: the tunable values a proposal was made with (a seed's #defines, a sample number)
Params = Mapping[str, "str | int | float"]


@dataclass
class Proposal:
    """A candidate to evaluate. ``spec`` is None when a reply had no usable code."""

    spec: CandidateSpec | None
    origin: str  # "seed:fused.cpp", "torch.compile:default", "anthropic:claude-...", ...
    params: Params = field(default_factory=dict)
    parent: Node | None = None
    mode: str = "initial"  # "initial" | "improve" | "fix"
    error: str | None = None  # why there is no spec (a format failure)
    llm_call_id: int | None = None
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Node:
    """One evaluated proposal: its place in the tree, its verdict and reward."""

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


@dataclass(frozen=True)
class Ask:
    """What a strategy asks a policy for: start from the reference, improve a node, or fix one."""

    parent: Node | None = None  # None: start from the reference
    mode: str = "initial"  # "initial" | "improve" | "fix"
    observation: str | None = None  # override the run's observation setting, e.g. "feedback"
    permitted: tuple[str, ...] | None = None  # techniques a staged schedule allows now; None: any
