"""What a model's caller needs from a budget: a place for one call, taken before it is sent.

``search.budget.Budget`` implements it; the critics and scorers below the search know only
this protocol, so they charge the search's budget without importing the search.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol


class Usage(Protocol):
    """What a reply cost: an ``llm.LLMResponse`` is one."""

    @property
    def source(self) -> str: ...  # "api" | "cache" | "replay": a cache hit costs nothing

    @property
    def tokens(self) -> int: ...

    @property
    def cost_usd(self) -> float: ...


class Reservation(Protocol):
    """One LLM call's place in the budget. ``settle`` charges the reply's real usage; leaving
    the ``with`` block unsettled (the request failed) gives the place back."""

    def settle(self, reply: Usage) -> None: ...

    def __enter__(self) -> Reservation: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class CallBudget(Protocol):
    """Where a model's caller reserves each call before sending it."""

    def reserve(self) -> Reservation | None:
        """A place for one call, or None when no room is left (the request must not be sent)."""
        ...

    def spends(self, *, asked: int = 0, scored: int = 0, evaluated: int = 0) -> None:
        """Declare the calls this caller makes per proposal asked for, scored, or evaluated,
        so a strategy can plan steps that fit the room left."""
        ...

    def asks(self, k: int, keep: int) -> int:
        """The most proposals (at most k) a step that evaluates its top ``keep`` may ask for."""
        ...
