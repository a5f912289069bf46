"""Rewards: the speedup when correct, tiered values for failures (DESIGN.md section 6).

format < compile error < runtime error / crash / timeout < wrong < correct (its speedup,
always > 0). A rejected candidate (one that cheated the harness) ranks with format
failures: nothing in it should be built upon. A correct verdict whose speedup is not to be
trusted (undecided, or from a weak check) is paid no more than parity (1.0), what a correct
but not faster candidate earns.
"""

from __future__ import annotations

from ..model.verdict import Verdict

TIERS: dict[str, float] = {
    "format": -1.0,
    "rejected": -1.0,
    "compile_error": -0.75,
    "runtime_error": -0.5,
    "crash": -0.5,
    "timeout": -0.5,
    "wrong": -0.25,
}


def reward(v: Verdict) -> float:
    """A faster verdict's reward is its confirmed speedup. Two kinds earn no more than 1.0,
    what a correct but not faster candidate earns:

    - an undecided one (an interval too wide to call, see ``oracle.verdict.UNDECIDED_WIDTH``):
      its point estimate (8.92x inside [0.54, 11.4]) is noise, and the search must not build
      on it as if it were the best candidate;
    - a weak-check one (``weak_check``: outputs that barely depend on the inputs, or timed
      calls that reuse the few known input sets because the reference rejects generated
      ones): a kernel that caches its answers keyed on those inputs would look fast, so its
      speedup is no evidence, and a search or an RL policy paid for it learns to cache.
    """
    if v.correct:
        speedup = float(v.speedup) if v.speedup is not None and v.speedup > 0 else 1e-3
        return min(speedup, 1.0) if v.diagnostics.get("undecided") or v.weak_check else speedup
    return TIERS[v.status]


def discounted_max(rewards_by_depth: list[float], gamma: float) -> float:
    """The objective along one path: the best discounted reward reached, not the sum."""
    return max((gamma**d) * r for d, r in enumerate(rewards_by_depth)) if rewards_by_depth else float("-inf")
