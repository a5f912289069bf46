"""The speedup verdict: a ratio of medians with a paired bootstrap 95% interval.

Samples come in rounds (one reference and one candidate sample per round, order
alternating), so resampling whole rounds keeps slow drifts of the machine paired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

N_BOOT = 2000


@dataclass(frozen=True)
class Speedup:
    point: float
    low: float
    high: float
    halves: tuple[float, float] = (float("inf"), float("inf"))

    def faster(self, min_speedup: float) -> bool:
        """The interval clears the bar, and so does each half of the run on its own."""
        return self.low >= min_speedup and min(self.halves) >= min_speedup


def _block_indices(n: int, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Moving-block bootstrap indices: runs of consecutive rounds, so a burst of machine
    noise that spans several rounds widens the interval instead of being averaged away."""
    block = max(1, int(round(n ** (1 / 3))))
    starts = rng.integers(0, n - block + 1, size=(n_boot, -(-n // block)))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n_boot, -1)
    return idx[:, :n]


def _ratio_boot(ref: np.ndarray, cand: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    n = min(len(ref), len(cand))
    ref, cand = ref[:n], cand[:n]
    idx = _block_indices(n, rng, n_boot)
    return np.median(ref[idx], axis=1) / np.median(cand[idx], axis=1)


def speedup(
    workloads: Sequence[tuple[Sequence[float], Sequence[float]]],
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Speedup:
    """Geometric mean over workloads of median(ref)/median(cand), with a 95% interval."""
    if not workloads:
        raise ValueError("no timings")
    rng = np.random.default_rng(seed)
    logs_point = []
    logs_boot = []
    for ref, cand in workloads:
        r = np.asarray(ref, dtype=np.float64)
        c = np.asarray(cand, dtype=np.float64)
        if len(r) == 0 or len(c) == 0:
            raise ValueError("a workload has no timings")
        c = np.maximum(c, 1e-12)
        logs_point.append(np.log(np.median(r) / np.median(c)))
        logs_boot.append(np.log(np.maximum(_ratio_boot(r, c, rng, n_boot), 1e-12)))
    point = float(np.exp(np.mean(logs_point)))
    boot = np.exp(np.mean(np.vstack(logs_boot), axis=0))
    low, high = np.percentile(boot, [2.5, 97.5])
    return Speedup(point, float(low), float(high), _halves(workloads))


def _halves(workloads: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[float, float]:
    """The point speedup of the first and of the second half of the rounds."""
    out = []
    for part in (0, 1):
        logs = []
        for ref, cand in workloads:
            n = min(len(ref), len(cand))
            lo, hi = (0, max(1, n // 2)) if part == 0 else (n // 2, n)
            r = np.asarray(ref[lo:hi], dtype=np.float64)
            c = np.maximum(np.asarray(cand[lo:hi], dtype=np.float64), 1e-12)
            logs.append(np.log(np.median(r) / np.median(c)))
        out.append(float(np.exp(np.mean(logs))))
    return (out[0], out[1])


def summary(samples: Sequence[float]) -> dict[str, float]:
    a = np.asarray(samples, dtype=np.float64)
    q25, med, q75 = np.percentile(a, [25, 50, 75])
    return {
        "median_s": float(med),
        "iqr_s": float(q75 - q25),
        "min_s": float(a.min()),
        "max_s": float(a.max()),
        "n": int(a.size),
    }


def geomean(values: Sequence[float]) -> float:
    a = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(a))))
