"""The search's plain records: a proposal, an evaluated node, an ask.

The strategies and policies (``search``), the critics (``critique``) and the reward-to-go
models (``value``) all read these; keeping them here lets ``critique`` and ``value`` sit
below ``search`` instead of importing it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module imports nothing from the package at run time
    from .candidate import CandidateSpec
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
    #: later samples of the same source (``source_key``): not evaluated again, not listed again
    repeats: list[Proposal] = field(default_factory=list)

    @property
    def parent(self) -> Node | None:
        return self.proposal.parent

    @property
    def samples(self) -> int:
        """How many proposals brought this source: the first and its repeats."""
        return 1 + len(self.repeats)

    @property
    def code(self) -> str | None:
        return self.proposal.spec.text if self.proposal.spec is not None else None


@dataclass
class NodeRow:
    """One sample's row in the store's search tree: where it sits, what was judged, and the
    critique it got; the store's ``add_node`` takes it whole."""

    run_id: int | None
    target_id: str
    parent_id: int | None
    strategy: str
    policy: str
    step: int
    depth: int
    origin: str
    candidate_hash: str | None
    status: str
    reward: float
    speedup: float | None
    candidate_s: float | None
    reasons: list[str]
    llm_call_id: int | None = None
    critique: str | None = None
    critic: str | None = None
    critique_flags: list[str] = field(default_factory=list)
    critique_call_id: int | None = None


def normalized_source(text: str) -> str:
    """A candidate's text as its identity sees it: line endings unified, trailing whitespace
    and leading or trailing blank lines dropped (none of them changes what is built)."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def source_key(spec: CandidateSpec) -> str:
    """What makes two candidates the same one: the format, the language and the normalized
    text. A seed's tunable values are ``#define`` lines (module constants) in that text, and
    the build flags are the target's, the same for every candidate, so nothing else is needed."""
    return hashlib.sha256(f"{spec.format}\0{spec.lang}\0{normalized_source(spec.text)}".encode()).hexdigest()


@dataclass(frozen=True)
class Ask:
    """What a strategy asks a policy for: start from the reference, improve a node, or fix one."""

    parent: Node | None = None  # None: start from the reference
    mode: str = "initial"  # "initial" | "improve" | "fix"
    observation: str | None = None  # override the run's observation setting, e.g. "feedback"
    permitted: tuple[str, ...] | None = None  # techniques a staged schedule allows now; None: any
