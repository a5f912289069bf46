"""The instruction timer, each path run once (a load_inline compat build is checked in
test_sandboxed_oracle.py, with the cache it fills)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import run_maxcode

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instruction_timer_is_deterministic_and_still_checks(project: Path) -> None:
    r = run_maxcode(
        ["check", "ref.py", "good.cpp", "cheats/zeros.cpp", "--timer", "instructions", "--json"], cwd=project
    )
    assert r.returncode == 1, r.stderr
    good, zeros = r.verdicts
    assert zeros["status"] == "wrong"
    assert good["status"] in ("faster", "not_faster"), good
    w = good["diagnostics"]["workloads"]["default"]
    assert good["diagnostics"]["timer"] == "instructions"
    for counts in (w["reference_counts"], w["candidate_counts"]):
        assert len(counts) == 9
        assert max(counts) / min(counts) < 1.05  # single-threaded counts barely move
    ratio = w["reference_instructions"] / w["candidate_instructions"]
    assert good["speedup"] == pytest.approx(ratio, rel=1e-3)
    assert good["speedup_ci"][1] / good["speedup_ci"][0] < 1.05
    # counts decide alone: the verdict follows from the interval, never from this machine's load
    assert good["status"] == ("faster" if good["speedup_ci"][0] >= 1.05 else "not_faster"), good


def test_instruction_timer_refuses_what_it_cannot_count(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "same_as_reference.py", "--timer", "instructions"], cwd=project)
    assert r.returncode == 2
    assert "native C++ candidates only" in r.stderr.strip().splitlines()[-1]
