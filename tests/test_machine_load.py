"""The machine's load as the oracle reads it (CPU pressure and steal): a loaded machine decides
whether a verdict's interval allows for the next run differing (issue 14), so the reading must
rise with other work and stay low without it."""

from __future__ import annotations

import os
import time

import pytest
from test_aa_runs import cpu_hog

from pytest_maxcode.oracle import load


def test_the_shares_come_from_the_counters_between_two_readings() -> None:
    a = load.Reading(at=10.0, pressure_us=1_000_000, steal=5, total=1000)
    b = load.Reading(at=12.0, pressure_us=1_600_000, steal=25, total=1400)
    got = load.between(a, b)
    assert got.pressure == pytest.approx(0.3) and got.steal == pytest.approx(0.05) and got.share == pytest.approx(0.3)
    noisy_host = load.between(a, load.Reading(at=12.0, pressure_us=1_000_000, steal=205, total=1400))
    assert noisy_host.share == pytest.approx(0.5)  # the host's steal counts as other work
    # a kernel without PSI: no pressure, only steal
    assert load.between(load.Reading(1.0, None, 0, 0), load.Reading(2.0, None, 0, 100)) == load.Load(None, 0.0)


@pytest.mark.skipif(not os.path.exists(load.PSI_CPU), reason="this kernel reports no CPU pressure (PSI)")
def test_spinning_processes_beside_a_spinning_timer_raise_the_pressure() -> None:
    def spin_for(seconds: float) -> load.Load:
        before = load.read()
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # the timer spins too, as the oracle's does
            pass
        return load.between(before, load.read())

    cores = len(os.sched_getaffinity(0))
    with cpu_hog(cores):
        loaded = spin_for(1.5)
    # one more runnable task than cores all the while: some task waits nearly all the time
    assert loaded.pressure is not None and loaded.pressure >= 0.5, loaded
