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


_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = {"s": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
         "us": 1e-6, "µs": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6, "ns": 1e-9}


def _kind(unit: str) -> tuple[str, float]:
    """What a unit measures, and its factor to the base unit: ("time", 1e-6) for "us"."""
    if unit == "%":
        return "percent", 1.0
    if unit in ("x", "×", "times"):
        return "ratio", 1.0
    if unit.endswith("B/s"):
        return "bytes/s", _SCALE[unit[:-3]]
    if "FLOP" in unit:
        return "flop/s", _SCALE[unit.split("FLOP")[0]]
    return "time", _TIME[unit]


def _given(facts_text: str) -> dict[str, list[float]]:
    """The facts' numbers by what they measure, in base units; ratios also give the
    percentages and reciprocals that follow from them by arithmetic ("0.8x" is "1.25x
    slower" and "20% slower")."""
    out: dict[str, list[float]] = {"percent": [], "ratio": [], "bytes/s": [], "flop/s": [], "time": []}
    for m in _MEASUREMENT.finditer(facts_text):
        kind, factor = _kind(m.group("unit"))
        out[kind].append(float(m.group("num")) * factor)
    for a in [r for r in out["ratio"] if r > 0]:
        out["ratio"].append(1 / a)
        out["percent"] += [100 * abs(a - 1), 100 * abs(1 - 1 / a)]
    return out


def _known(value: float, text: str, factor: float, allowed: list[float]) -> bool:
    slack = _quoted_precision(text) * factor
    base = value * factor
    return any(abs(base - a) <= max(slack, 0.005 * abs(a)) + 1e-15 for a in allowed)


def unsupported_claims(diagnosis: str, facts_text: str, code: str = "", *, counters: bool = False) -> list[str]:
    """The diagnosis's claims no given fact supports, each quoted as written. A claim must
    match a fact of its own kind (a percentage a percentage, a time a time, in any unit);
    numbers written in the code count as given too (a loop "runs 1000 times")."""
    given = _given(facts_text)
    in_code = [float(m.group(0)) for m in _NUMBER.finditer(code)]
    flags = []
    for m in _MEASUREMENT.finditer(diagnosis):
        kind, factor = _kind(m.group("unit"))
        num = m.group("num")
        if not (_known(float(num), num, factor, given[kind]) or _known(float(num), num, 1.0, in_code)):
            flags.append(m.group(0).strip())
    if not counters:
        flags += [f"{m.group(0)} (no hardware counters were measured)" for m in COUNTER_TERMS.finditer(diagnosis)]
    return flags
