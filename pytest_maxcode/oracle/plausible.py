"""Plausibility checks on a timed verdict: results no honest kernel can produce.

Two pure functions, each returning a one-line rejection reason or None:

- :func:`roof_violation`: a call faster than this machine's measured memory or compute
  roof allows, by a clear margin (the timing was faked, or work left the timed region).
- :func:`instructions_vs_wall`: an instruction-count speedup far beyond what wall time
  shows (collection switched off, or work done where callgrind does not count it).

The margins are chosen so that honest kernels do not trip them; the reasoning is in each
docstring. Both are a backstop behind the trust boundary, not a replacement for it.
"""

from __future__ import annotations

import math

from .probe import cache_bytes as machine_cache

#: how far beyond the measured roof a call may seem to run before it is rejected
ROOF_MARGIN = 4.0
#: instruction speedup allowed per unit of wall speedup when the candidate is not memory-bound
INSTRUCTIONS_MARGIN = 4.0
#: ... and when it is: SIMD lanes times unrolling can cut instructions this much at equal time
MEMORY_BOUND_INSTRUCTIONS_MARGIN = 64.0
#: a candidate reaching this share of the memory roof in wall time counts as memory-bound
MEMORY_BOUND_FRACTION = 0.25


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _seconds(s: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def roof_violation(
    *,
    bytes_per_call: int,
    flops_per_call: int,
    seconds_per_call: float,
    bandwidth_Bps: float | None,
    flops_per_s: float | None,
    margin: float = ROOF_MARGIN,
    cache_bytes: int | None = None,
) -> str | None:
    """Why a call of ``seconds_per_call`` is physically implausible on this machine, or None.

    Memory: only bytes that cannot have been on chip count. ``bytes_per_call`` (inputs plus
    outputs) minus twice ``cache_bytes`` (what the caches may hold when the call starts, and
    again as dirty lines when it ends; default: this CPU's caches, from
    :func:`probe.cache_bytes`) must cross the memory bus during the call, so data that fits
    in cache never trips the roof, however fast. What remains is held against ``margin``
    times the measured bandwidth. The probe is a copy counted as one read plus one write;
    write-allocate traffic it does not count and read-only streams run faster than copies,
    so an honest kernel can show up to about 2x the probe's figure; 4x also covers a probe
    taken on a busy machine (a plain streaming loop reached 1.7x the probe's 22 GB/s on the
    development machine).

    Compute: ``flops_per_call`` against ``margin`` times the measured float32 GEMM rate
    (torch's BLAS reaches 70-90% of peak, so 4x is far past peak). Pass only FLOPs the
    candidate cannot avoid, and only a roof measured in the arithmetic it may use: the
    reference's counted FLOPs can be cut by any factor by an honest rewrite (diag(a) @ B as
    a row scaling, reassociating a matrix chain), and bf16/int8 matrix units (AMX, tensor
    cores) run 8-16x the float32 rate. ``None`` or 0 skips either check.

    Parameters because the roof needs the call's time and each of the machine's measured limits and
    the call's own counts (bytes, FLOPs, device, timer), all plain numbers.
    """
    if bytes_per_call < 0 or flops_per_call < 0 or margin <= 1 or not math.isfinite(seconds_per_call):
        raise ValueError(
            f"roof_violation: needs bytes, FLOPs >= 0, a finite time and a margin > 1 "
            f"(got {bytes_per_call}, {flops_per_call}, {seconds_per_call}, {margin})"
        )
    if cache_bytes is None:
        cache_bytes = machine_cache("cpu")
    dram_bytes = max(0, bytes_per_call - 2 * cache_bytes)
    if seconds_per_call <= 0:
        if dram_bytes or (flops_per_call and flops_per_s):
            return (
                f"a call took {seconds_per_call:g} s for {_si(bytes_per_call, 'B')} and "
                f"{_si(flops_per_call, 'FLOP')}: no machine does that"
            )
        return None
    if bandwidth_Bps and dram_bytes:
        needed = dram_bytes / seconds_per_call
        if needed > margin * bandwidth_Bps:
            return (
                f"{_si(needed, 'B/s')} of memory traffic needed, {needed / bandwidth_Bps:.3g}x this machine's "
                f"measured {_si(bandwidth_Bps, 'B/s')} memory roof ({_si(dram_bytes, 'B')} per call beyond twice "
                f"its {_si(cache_bytes, 'B')} of cache, in {_seconds(seconds_per_call)}; the limit is {margin:g}x)"
            )
    if flops_per_s and flops_per_call:
        needed = flops_per_call / seconds_per_call
        if needed > margin * flops_per_s:
            return (
                f"{_si(needed, 'FLOP/s')} needed, {needed / flops_per_s:.3g}x this machine's measured "
                f"{_si(flops_per_s, 'FLOP/s')} compute roof ({_si(flops_per_call, 'FLOP')} per call in "
                f"{_seconds(seconds_per_call)}; the limit is {margin:g}x)"
            )
    return None


def instructions_vs_wall(
    instr_speedup: float,
    wall_speedup_low: float,
    wall_speedup_high: float,
    *,
    bandwidth_fraction: float | None = None,
) -> str | None:
    """Why an instruction-count speedup is implausibly far above the wall-clock speedup, or None.

    The wall interval must come from native timing (the ordinary timer), not from inside
    valgrind. Time is instructions divided by instructions per cycle, so the ratio of the two
    speedups is the reference's IPC over the candidate's, and honest code can move it a lot.
    Measured on the development machine (AMD EPYC, 2 cores), a scalar loop ``b = 2a + 1``
    against its AVX2 build, which runs 16.6x fewer instructions: wall speedup 8.3x in L1
    (ratio 2), 7.6x in L2 (2.2), 3.7x in L3 (4.5), 2.7x at 23 MB (6.1), 1.17x from DRAM (14);
    an AVX2 gather, one instruction for eight loads, cut instructions 7x and ran 0.59x (12).
    What separates the two regimes is bandwidth: all of these high ratios reach at least
    0.85 of the machine's measured DRAM copy bandwidth (bytes in and out per second of wall
    time; cache-resident data goes well past 1), where fewer instructions cannot make the
    memory faster. So:

    - ``bandwidth_fraction`` below ``MEMORY_BOUND_FRACTION`` (0.25: compute-bound): the ratio
      may be up to ``INSTRUCTIONS_MARGIN`` (4x; the AVX2 build of a division and square-root
      loop ran 16x fewer instructions and 8x faster, ratio 2, at 0.17 of the DRAM roof).
    - at or above it, or unknown (``None``): up to ``MEMORY_BOUND_INSTRUCTIONS_MARGIN`` (64x:
      32 byte lanes of AVX2 times unrolling), which still catches collection switched off
      for the call, since that leaves almost nothing counted.

    No claim (``instr_speedup <= 1``) is never rejected.
    """
    if not (wall_speedup_low > 0 and wall_speedup_high >= wall_speedup_low and instr_speedup > 0):
        raise ValueError(
            f"instructions_vs_wall: needs positive speedups and low <= high "
            f"(got {instr_speedup}, [{wall_speedup_low}, {wall_speedup_high}])"
        )
    if instr_speedup <= 1:
        return None
    bound = bandwidth_fraction is None or bandwidth_fraction >= MEMORY_BOUND_FRACTION
    margin = MEMORY_BOUND_INSTRUCTIONS_MARGIN if bound else INSTRUCTIONS_MARGIN
    ratio = instr_speedup / wall_speedup_high
    if ratio <= margin:
        return None
    return (
        f"instructions say {instr_speedup:.3g}x faster but wall time says {wall_speedup_low:.3g}x-"
        f"{wall_speedup_high:.3g}x: {ratio:.3g}x apart, beyond the {margin:g}x an honest "
        f"{'memory-bound ' if bound else ''}kernel shows (collection switched off, or work done "
        f"where callgrind does not count it)"
    )
