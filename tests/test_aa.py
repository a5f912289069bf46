"""A/A: the reference checked against itself must essentially never be called faster."""

from __future__ import annotations

from pathlib import Path

from conftest import run_maxcode

RUNS = 50


def test_reference_against_itself_is_not_faster_in_50_runs(project: Path) -> None:
    r = run_maxcode(
        ["check", "ref.py", *["same_as_reference.py"] * RUNS, "--json", "--time-budget", "0.15"],
        cwd=project,
    )
    assert r.returncode == 0, r.stderr
    verdicts = r.verdicts
    assert len(verdicts) == RUNS
    statuses = [v["status"] for v in verdicts]
    assert statuses.count("faster") == 0, [v["speedup_ci"] for v in verdicts]
    assert set(statuses) == {"not_faster"}
    # the intervals are honest: they are centred near 1 and mostly cover it
    speedups = sorted(v["speedup"] for v in verdicts)
    assert 0.9 < speedups[RUNS // 2] < 1.1
    covering = sum(v["speedup_ci"][0] <= 1.0 <= v["speedup_ci"][1] for v in verdicts)
    assert covering >= RUNS // 2
