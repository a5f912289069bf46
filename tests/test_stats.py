"""The speedup statistic: ratio of medians, paired bootstrap interval, geometric mean."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_maxcode.oracle import stats


def test_clear_speedup_has_interval_around_truth() -> None:
    rng = np.random.default_rng(1)
    ref = 2.0 + rng.normal(0, 0.05, 200)
    cand = 1.0 + rng.normal(0, 0.05, 200)
    sp = stats.speedup([(ref, cand)])
    assert sp.low < 2.0 < sp.high
    assert sp.high - sp.low < 0.1
    assert sp.faster(1.05)


def test_identical_distributions_are_not_faster() -> None:
    rng = np.random.default_rng(2)
    false_faster = 0
    for trial in range(200):
        ref = rng.lognormal(0, 0.2, 40)
        cand = rng.lognormal(0, 0.2, 40)
        if stats.speedup([(ref, cand)], seed=trial).faster(1.05):
            false_faster += 1
    assert false_faster <= 2


def test_too_few_samples_give_a_wide_interval() -> None:
    sp = stats.speedup([([1.0, 3.0, 2.0], [1.0, 2.0, 1.5])])
    assert sp.high / sp.low > 1.3


def test_geomean_over_workloads() -> None:
    sp = stats.speedup([([4.0] * 20, [1.0] * 20), ([1.0] * 20, [1.0] * 20)])
    assert sp.point == pytest.approx(2.0)
    assert sp.low == pytest.approx(2.0) and sp.high == pytest.approx(2.0)


def test_summary() -> None:
    s = stats.summary([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_s"] == 3.0 and s["n"] == 5 and s["max_s"] == 100.0


def test_empty_timings_are_an_error() -> None:
    with pytest.raises(ValueError):
        stats.speedup([([], [1.0])])


def test_a_burst_of_noise_does_not_make_identical_code_faster() -> None:
    """Machine noise comes in bursts over consecutive rounds, not independently per round."""
    rng = np.random.default_rng(3)
    false_faster = 0
    for trial in range(200):
        ref = rng.lognormal(0, 0.05, 40)
        cand = rng.lognormal(0, 0.05, 40)
        start = rng.integers(0, 30)
        ref[start : start + 10] *= 1.5  # a stall that happened to hit the reference's rounds
        if stats.speedup([(ref, cand)], seed=trial).faster(1.05):
            false_faster += 1
    assert false_faster <= 4


def test_faster_needs_both_halves_of_the_run() -> None:
    ref = np.r_[np.full(20, 2.0), np.full(20, 1.0)]  # only the first half looks faster
    cand = np.ones(40)
    sp = stats.speedup([(ref, cand)])
    assert sp.halves[0] == pytest.approx(2.0) and sp.halves[1] == pytest.approx(1.0)
    assert not sp.faster(1.05)
