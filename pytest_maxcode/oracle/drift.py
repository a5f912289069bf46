"""This machine's drift from one whole run to the next, learned from its own repeats.

A run's blocks share its minute, so they cannot show how far the next run will move; the
interval adds a run-to-run spread known from elsewhere (:data:`stats.QUIET_RUN_SPREAD`, set
from a few hosts). A host that drifts more than that quotes intervals the next run misses, and
``maxcode check --repeat`` / ``maxcode remeasure`` show it. Those repeats are separate runs of
one candidate, so they measure the drift itself: it is kept in the per-machine cache, next to
the bandwidth probe, and later verdicts on this machine allow for it where it is the larger.
It only ever widens an interval: a quiet machine keeps the default, since a few repeats cannot
rule out the episodes of drift the default was set from.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._files import write_atomic
from ..model.verdict import Verdict
from . import probe, stats

#: repeats with blocks needed before their spread says anything (sd from four degrees of freedom)
MIN_RUNS = 5
#: estimates kept per machine and device; the largest of them is used
KEPT = 5


@dataclass(frozen=True)
class Drift:
    """The run-to-run part of the spread of ``runs`` repeats (sd of the log speedup): their
    points' spread, less what their own blocks' noise explains."""

    spread: float
    runs: int

    def line(self, device: str) -> str:
        default = default_spread(device)
        used = "later verdicts on this machine allow for it" if self.spread > default else \
            f"within the {math.expm1(default):.0%} every verdict allows for"
        return (f"runs on this machine differ by about {math.expm1(self.spread):.0%} from one to the next "
                f"(sd {self.spread:.3f} of the log speedup over {self.runs} runs): {used}")


def note(run_spread: float) -> str:
    """What a verdict and its report say when the interval allows for this machine's learned drift."""
    return (f"the interval allows for this machine's drift between runs (about {math.expm1(run_spread):.0%}, "
            f"learned from its repeats by maxcode check --repeat or maxcode remeasure)")


def default_spread(device: str) -> float:
    """The run-to-run spread a quiet run allows for when nothing was learned."""
    return stats.GPU_RUN_SPREAD if device == "cuda" else stats.QUIET_RUN_SPREAD


def estimate_drift(runs: Sequence[Verdict]) -> Drift | None:
    """The drift shown by separate runs of one candidate, or None when fewer than
    :data:`MIN_RUNS` of them were measured in blocks on a quiet machine (a loaded run already
    allows for :data:`stats.LOADED_RUN_SPREAD`, and a single block's point is not a run's)."""
    points, within = [], []
    for v in runs:
        noise = v.diagnostics.get("noise")
        used = [b["speedup"] for b in v.diagnostics.get("blocks", []) if b.get("used") and b.get("speedup")]
        if not isinstance(noise, dict) or noise.get("loaded") or len(used) < 2 or not v.speedup:
            continue
        points.append(math.log(v.speedup))
        within.append(statistics.variance([math.log(s) for s in used]) / len(used))  # of the run's mean
    if len(points) < MIN_RUNS:
        return None
    return Drift(round(math.sqrt(max(0.0, statistics.variance(points) - statistics.fmean(within))), 4), len(points))


def _path(cache_dir: Path, device: str) -> Path:
    # the CPU's fingerprint even for a GPU: naming the GPU would start CUDA in the trusted process
    return probe.cache_path(cache_dir, {**probe.machine_fingerprint("cpu"), "device": device}, "-drift")


def _kept(path: Path) -> list[dict]:
    """The estimates kept in ``path``; none where it is missing or unreadable."""
    try:
        kept = json.loads(path.read_text())["estimates"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return kept if isinstance(kept, list) else []


def learned(cache_dir: Path, device: str) -> float | None:
    """The largest drift this machine's recent repeats showed for ``device``, or None."""
    try:
        return max((float(e["spread"]) for e in _kept(_path(cache_dir, device))), default=None)
    except (ValueError, KeyError, TypeError):
        return None


def remember_drift(cache_dir: Path, device: str, drift: Drift) -> None:
    """Keep ``drift`` among this machine's last :data:`KEPT` estimates; a cache this user cannot
    write loses the estimate, not the run."""
    path = _path(cache_dir, device)
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    kept = [*_kept(path), {"spread": drift.spread, "runs": drift.runs, "measured_at": now}][-KEPT:]
    try:
        write_atomic(path, json.dumps({"device": device, "estimates": kept}, indent=2))
    except OSError:
        pass


def run_spread(cache_dir: Path, device: str) -> float | None:
    """The spread a quiet run on this machine allows for, where its repeats showed more than
    the default; None where they did not (or none were made)."""
    seen = learned(cache_dir, device)
    return seen if seen is not None and seen > default_spread(device) else None
