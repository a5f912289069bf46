"""Budgets: evaluations, LLM calls, tokens, money and wall time, per target and per run.

The search stops at whichever limit it reaches first and says which. Counts are never
exceeded: the loop asks ``room`` before each batch of evaluations, and every LLM request
(a proposal, a reranker's question, a critique) takes its place with ``reserve`` before it
is sent; a request with no place left is not sent. A reply settles its place with what it
really cost (a cache hit costs nothing and gives the place back). Tokens and money are
known only once a reply arrives, so the requests in flight can overshoot them by their own
size; no request is sent once they are reached.

Callers declare what they spend per proposal (``spends``), so a strategy that asks more
proposals than it evaluates (a reranked step) can plan one that fits (``asks``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType

from ..model.budget import Usage

KINDS = ("evaluations", "llm_calls", "tokens", "cost_usd", "time_s")
WHAT = {
    "evaluations": "evaluation budget of {:g}",
    "llm_calls": "LLM-call budget of {:g}",
    "tokens": "token budget of {:g}",
    "cost_usd": "money budget of ${:g}",
    "time_s": "time limit of {:g} s",
}
#: limits that end sending requests once reached (known only after replies)
AFTER_THE_FACT = ("tokens", "cost_usd", "time_s")


@dataclass(frozen=True)
class Limits:
    evaluations: int | None = None
    llm_calls: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    time_s: float | None = None


@dataclass(frozen=True)
class Spend:
    """LLM calls a step makes per proposal asked for (the policy's request), per proposal
    scored (a reranker's question) and per proposal evaluated (a critique)."""

    asked: int = 0
    scored: int = 0
    evaluated: int = 0


class Meter:
    """What a scope has spent, and the LLM calls it has in flight; shared by the threads
    searching targets concurrently."""

    def __init__(self, limits: Limits, scope: str) -> None:
        self.limits = limits
        self.scope = scope
        self.start = time.monotonic()
        self.spent = {k: 0.0 for k in KINDS if k != "time_s"}
        self.in_flight = 0  # LLM calls reserved and not yet settled
        self._lock = threading.Lock()

    def charge(self, **amounts: float) -> None:
        with self._lock:
            for k, v in amounts.items():
                self.spent[k] += v

    def used(self, kind: str) -> float:
        return time.monotonic() - self.start if kind == "time_s" else self.spent[kind]

    def reached(self) -> str | None:
        for kind in KINDS:
            limit = getattr(self.limits, kind)
            if limit is not None and self.used(kind) >= limit:
                return f"{WHAT[kind].format(limit)} {self.scope} reached"
        return None

    def left(self, kind: str) -> float:
        """What is left of a limit; for LLM calls, less the calls in flight."""
        limit = getattr(self.limits, kind)
        if limit is None:
            return float("inf")
        return max(0.0, limit - self.used(kind) - (self.in_flight if kind == "llm_calls" else 0))

    def calls_open(self) -> bool:
        """Whether a request may be sent at all: no limit known after the fact is reached."""
        return all(getattr(self.limits, k) is None or self.used(k) < getattr(self.limits, k) for k in AFTER_THE_FACT)

    def take_call(self) -> bool:
        with self._lock:
            if self.left("llm_calls") < 1 or not self.calls_open():
                return False
            self.in_flight += 1
            return True

    def end_call(self, reply: Usage | None) -> None:
        """The call is over: charged with the reply's usage, in the same step that frees its
        place, so no other thread can take the place in between."""
        with self._lock:
            self.in_flight -= 1
            if reply is not None and reply.source != "cache":
                self.spent["llm_calls"] += 1
                self.spent["tokens"] += reply.tokens
                self.spent["cost_usd"] += reply.cost_usd


class Reservation:
    """One LLM call's place in every meter of a budget (``model.budget.Reservation``)."""

    def __init__(self, meters: list[Meter]) -> None:
        self._meters = meters
        self._open = True
        self._lock = threading.Lock()

    def _end(self, reply: Usage | None) -> None:
        with self._lock:
            if not self._open:
                return
            self._open = False
        for m in self._meters:
            m.end_call(reply)

    def settle(self, reply: Usage) -> None:
        """Charge the reply's call, tokens and money (nothing when the response cache served it)."""
        self._end(reply)

    def release(self) -> None:
        """Give the place back unused (the request was not sent, or failed); once only."""
        self._end(None)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class Budget:
    """One target's view: its own meter and the run's."""

    def __init__(self, target: Limits, run: Meter | None = None) -> None:
        self.target = Meter(target, "per target")
        self.run = run
        self._meters = [self.target] + ([run] if run is not None else [])
        self.per = Spend()

    def charge(self, **amounts: float) -> None:
        for m in self._meters:
            m.charge(**amounts)

    def reserve(self) -> Reservation | None:
        """A place for one LLM call in every meter, or None (the request must not be sent)."""
        taken: list[Meter] = []
        for m in self._meters:
            if not m.take_call():
                for t in taken:
                    t.end_call(None)
                return None
            taken.append(m)
        return Reservation(taken)

    def spends(self, *, asked: int = 0, scored: int = 0, evaluated: int = 0) -> None:
        """A caller of a model declares its calls per proposal asked, scored or evaluated."""
        p = self.per
        self.per = Spend(max(p.asked, asked), max(p.scored, scored), max(p.evaluated, evaluated))

    def exhausted(self) -> str | None:
        for m in self._meters:
            why = m.reached()
            if why:
                return why
        return None

    def calls_left(self) -> float:
        """LLM calls that may still be sent (0 once a token, money or time limit is reached)."""
        if not all(m.calls_open() for m in self._meters):
            return 0.0
        return min(m.left("llm_calls") for m in self._meters)

    def room(self, *, calls_each: int) -> int:
        """How many proposals the next batch may hold, each costing ``calls_each`` LLM calls
        (its proposal, and its critique when an LLM writes it)."""
        n = min(m.left("evaluations") for m in self._meters)
        if calls_each:
            n = min([n] + [m.left("llm_calls") / max(1, calls_each) for m in self._meters])
        return int(min(n, 1 << 30))

    def asks(self, k: int, keep: int) -> int:
        """The most proposals (at most k) a step that evaluates only its top ``keep`` may ask
        for: their requests, the reranker's questions (asked only when there are more
        proposals than it keeps) and the critiques of those kept must fit the LLM calls left,
        and those kept the evaluations left. 0: not even one fits."""
        calls = self.calls_left()
        evaluations = min(m.left("evaluations") for m in self._meters)
        per = self.per
        for a in range(k, 0, -1):
            sent = min(a, keep)
            cost = a * per.asked + (a * per.scored if a > keep else 0) + sent * per.evaluated
            if cost <= calls and sent <= evaluations:
                return a
        return 0
