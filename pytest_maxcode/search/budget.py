"""Budgets: evaluations, LLM calls, tokens, money and wall time, per target and per run.

The search stops at whichever limit it reaches first and says which. Counts (evaluations,
LLM calls) are never exceeded: the loop asks ``room`` before each batch. Tokens and money
are known only once a reply arrives, so a batch in flight can overshoot them by its own
size; the search stops right after.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

KINDS = ("evaluations", "llm_calls", "tokens", "cost_usd", "time_s")
WHAT = {
    "evaluations": "evaluation budget of {:g}",
    "llm_calls": "LLM-call budget of {:g}",
    "tokens": "token budget of {:g}",
    "cost_usd": "money budget of ${:g}",
    "time_s": "time limit of {:g} s",
}


@dataclass(frozen=True)
class Limits:
    evaluations: int | None = None
    llm_calls: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    time_s: float | None = None


class Meter:
    """What a scope has spent; shared by the threads searching targets concurrently."""

    def __init__(self, limits: Limits, scope: str) -> None:
        self.limits = limits
        self.scope = scope
        self.start = time.monotonic()
        self.spent = {k: 0.0 for k in KINDS if k != "time_s"}
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
        limit = getattr(self.limits, kind)
        return float("inf") if limit is None else max(0.0, limit - self.used(kind))


class Budget:
    """One target's view: its own meter and the run's."""

    def __init__(self, target: Limits, run: Meter | None = None) -> None:
        self.target = Meter(target, "per target")
        self.run = run
        self._meters = [self.target] + ([run] if run is not None else [])

    def charge(self, **amounts: float) -> None:
        for m in self._meters:
            m.charge(**amounts)

    def charge_reply(self, resp: Any) -> None:
        """An LLM reply costs a call, its tokens and its money, unless the response cache served it."""
        if resp.source != "cache":
            self.charge(llm_calls=1, tokens=resp.tokens, cost_usd=resp.cost_usd)

    def exhausted(self) -> str | None:
        for m in self._meters:
            why = m.reached()
            if why:
                return why
        return None

    def room(self, *, calls_each: int) -> int:
        """How many proposals the next batch may hold, each costing ``calls_each`` LLM calls
        (its proposal, and its critique when an LLM writes it)."""
        n = min(m.left("evaluations") for m in self._meters)
        if calls_each:
            n = min([n] + [m.left("llm_calls") / max(1, calls_each) for m in self._meters])
        return int(min(n, 1 << 30))
