"""Does a critique cite only what the oracle measured?

A diagnosis that states "35% of bandwidth" or "occupancy is low" is trusted by the next
proposal; when nothing measured it, the search is steered by an invention. The check is
deliberately narrow, so it flags rarely and for a reason a reader can verify:

- a *measurement* in the diagnosis (a number with a unit: %, x, s/ms/us/ns, B/s, FLOP/s)
  must match a number in the facts the critic was given, at the precision it is quoted;
- hardware-counter claims (occupancy, cache hit rates, bank conflicts, ...) need counters.

Plain numbers (a block size, a vector width) and the next steps (advice, not claims) are
not checked.
"""

from __future__ import annotations

import re

_MEASUREMENT = re.compile(
    r"(?<![\w.])(?P<num>\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*"
    r"(?P<unit>%|x\b|×|[kMGT]?B/s\b|[kMGT]?FLOP/?s\b|[mun]s\b|µs\b|s\b|seconds?\b|milliseconds?\b|microseconds?\b|times\b)",
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?")
COUNTER_TERMS = re.compile(
    r"\b(occupancy|bank conflicts?|(?:L1|L2|cache) hit(?: rate)?|hit rate|warp stalls?|stall reasons?|register spills?|"
    r"spilled registers|achieved occupancy|sm efficiency|branch divergence (?:of|at) \d)",
    re.IGNORECASE,
)


def _quoted_precision(text: str) -> float:
    """Half a unit in the last place the number was written with (35 -> 0.5, 35.2 -> 0.05)."""
    if "e" in text.lower():
        return abs(float(text)) * 0.005
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** (-decimals)


def _known(value: float, text: str, allowed: list[float]) -> bool:
    slack = _quoted_precision(text)
    return any(abs(value - a) <= max(slack, 0.005 * abs(a)) + 1e-12 for a in allowed)


def unsupported_claims(diagnosis: str, facts_text: str, code: str = "", *, counters: bool = False) -> list[str]:
    """The diagnosis's claims no given fact supports, each quoted as written."""
    given = [float(m.group(0)) for m in _NUMBER.finditer(facts_text + "\n" + code)]
    # what follows from a ratio by arithmetic alone: 0.8x is "1.25x slower", "20% slower"
    allowed = given + [d for a in given if a > 0 for d in (1 / a, 100 * abs(a - 1), 100 * abs(1 - 1 / a))]
    flags = []
    for m in _MEASUREMENT.finditer(diagnosis):
        if not _known(float(m.group("num")), m.group("num"), allowed):
            flags.append(m.group(0).strip())
    if not counters:
        flags += [f"{m.group(0)} (no hardware counters were measured)" for m in COUNTER_TERMS.finditer(diagnosis)]
    return flags
