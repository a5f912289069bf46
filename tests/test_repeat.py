"""``maxcode check --repeat N`` (issue 14): re-measure a quoted verdict and say how many of the
repeats fell inside its interval."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import DATA, run_maxcode

from pytest_maxcode.oracle import drift, probe
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.repeat import Repeats, repeat
from pytest_maxcode.oracle.verdict import Verdict


def _v(speedup: float | None, ci: list[float] | None = None, status: str = "not_faster") -> Verdict:
    return Verdict("k.cpp", status, speedup=speedup, speedup_ci=ci)


def test_coverage_counts_the_repeats_inside_the_quoted_interval() -> None:
    r = Repeats(_v(1.5, [1.3, 1.7], "faster"), [_v(1.31), _v(1.69), _v(1.2), _v(None, status="crash"), _v(1.8)])
    assert r.inside == 2
    assert r.line() == "k.cpp: 2 of 5 repeats fell inside the quoted 1.5x [1.3, 1.7] (1.31x, 1.69x, 1.2x, crash, 1.8x)"


def test_a_verdict_without_an_interval_has_nothing_to_re_measure() -> None:
    assert Repeats(_v(None, None, "wrong"), []).line() == "k.cpp: no interval to re-measure (wrong)"


def test_repeats_are_fresh_runs_that_record_the_machines_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a machine cache of the test's own (a drift learned here must not widen other tests' verdicts),
    # holding what the suite's has already measured (the probes)
    cache = tmp_path / "machine-cache"
    if probe.cache_dir().is_dir():
        shutil.copytree(probe.cache_dir(), cache)
    monkeypatch.setenv("MAXCODE_CACHE_DIR", str(cache))
    for name in ("ref.py", "good.cpp"):
        shutil.copy(DATA / "chain" / name, tmp_path / name)
    ref = parse_reference(str(tmp_path / "ref.py"))
    cand = CandidateSpec.from_path(tmp_path / "good.cpp")
    # no range sets: each repeat is its own fresh oracle either way, and what is checked here is
    # the repeats' seeds, their blocks and the lines, not the range sets
    config = CheckConfig(time_budget=0.05, timeout=120, seed=1234, ranges=False)
    with Oracle(ref, config, tmp_path) as oracle:
        quoted = oracle.check([cand])[0]
    r = repeat(ref, config, tmp_path, cand, quoted, drift.MIN_RUNS - 1)
    assert all(v.status in ("faster", "not_faster") for v in r.again), [v.reasons for v in r.again]
    seeds = {quoted.diagnostics["seed"], *(v.diagnostics["seed"] for v in r.again)}
    assert len(seeds) == drift.MIN_RUNS  # a chosen seed repeats the inputs; a repeat draws its own
    assert f"of {drift.MIN_RUNS - 1} repeats fell inside the quoted" in r.line()
    # the quoted run and the repeats, each in blocks where it was "faster", measure the drift; runs
    # on a loaded machine are left out (they allow for more already): a busy runner may have too few
    measured = [v for v in [quoted, *r.again] if "noise" in v.diagnostics and not v.diagnostics["noise"]["loaded"]]
    if len(measured) >= drift.MIN_RUNS:
        assert r.drift is not None and r.drift.runs == len(measured)
        assert drift.learned(cache, "cpu") == r.drift.spread
        assert r.lines()[1].startswith("good.cpp: runs on this machine differ by about ")
    else:
        assert r.drift is None and drift.learned(cache, "cpu") is None and r.lines() == [r.line()]


def test_the_command_line_prints_the_coverage(tmp_path: Path) -> None:
    for name in ("ref.py", "good.cpp"):
        shutil.copy(DATA / "chain" / name, tmp_path / name)
    r = run_maxcode(["check", "ref.py", "good.cpp", "--repeat", "1", "--time-budget", "0.05"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "good.cpp: " in r.stdout and " of 1 repeats fell inside the quoted " in r.stdout, r.stdout[-1500:]
    j = run_maxcode(["check", "ref.py", "good.cpp", "--repeat", "1", "--time-budget", "0.05", "--json"], cwd=tmp_path)
    (v,) = j.verdicts
    assert v["diagnostics"]["repeats"]["n"] == 1 and len(v["diagnostics"]["repeats"]["speedups"]) == 1
