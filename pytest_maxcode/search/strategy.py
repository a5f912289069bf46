"""The strategy protocol: how a search method plugs into the loop.

The loop owns budgets, the oracle and the store; a strategy only decides what to try
next. Each round the loop calls ``propose(n)`` (n is the room left in the budgets), sends
the proposals through the oracle's batch path, adds the results to the state as nodes,
and calls ``update`` with them. ``should_stop`` gives the strategy's own reason to end
(depth reached, nothing left to try); the budgets' reasons are the loop's.

Strategies ask a ``Proposer`` (the policy: built-in seeds, an LLM, a plugin's) for
candidates with ``Ask`` records: start from the reference, improve a node, or fix one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..model.search import Ask, Node, Proposal
from .state import SearchState

__all__ = ["Ask", "Proposer", "Strategy", "StrategyParams"]  # Ask lives in model.search


class Proposer(Protocol):
    """A policy. Returns at most one proposal per ask, in order; fewer (or none) when it
    has nothing more to offer. A reply without usable code is still a proposal (its
    ``spec`` is None and ``error`` says why): a format failure is a result too."""

    name: str

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]: ...


@dataclass(frozen=True)
class StrategyParams:
    k: int = 4  # proposals per step
    depth: int | None = None  # steps; None: until a budget ends the search
    width: int = 2  # beam width


class Strategy(Protocol):
    name: str

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None: ...

    def propose(self, n: int) -> list[Proposal]: ...

    def update(self, nodes: list[Node]) -> None: ...

    def best(self) -> Node | None: ...

    def should_stop(self) -> str | None: ...
