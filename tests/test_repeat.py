"""``maxcode check --repeat N`` (issue 14): re-measure a quoted verdict and say how many of the
repeats fell inside its interval."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import DATA, run_maxcode

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


def test_repeats_are_fresh_runs_of_the_same_candidate(tmp_path: Path) -> None:
    for name in ("ref.py", "good.cpp"):
        shutil.copy(DATA / "chain" / name, tmp_path / name)
    ref = parse_reference(str(tmp_path / "ref.py"))
    cand = CandidateSpec.from_path(tmp_path / "good.cpp")
    # one block, no range sets: each repeat is its own fresh oracle either way, and what is
    # checked here is the repeats' seeds and the coverage line, not the interval's blocks
    config = CheckConfig(time_budget=0.05, timeout=120, seed=1234, blocks=1, ranges=False)
    with Oracle(ref, config, tmp_path) as oracle:
        quoted = oracle.check([cand])[0]
    r = repeat(ref, config, tmp_path, cand, quoted, 2)
    assert [v.status in ("faster", "not_faster") for v in r.again] == [True, True], [v.reasons for v in r.again]
    seeds = {quoted.diagnostics["seed"], *(v.diagnostics["seed"] for v in r.again)}
    assert len(seeds) == 3  # a chosen seed repeats the inputs; a repeat draws its own
    assert "of 2 repeats fell inside the quoted" in r.line()


def test_the_command_line_prints_the_coverage(tmp_path: Path) -> None:
    for name in ("ref.py", "good.cpp"):
        shutil.copy(DATA / "chain" / name, tmp_path / name)
    r = run_maxcode(["check", "ref.py", "good.cpp", "--repeat", "1", "--time-budget", "0.05"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "good.cpp: " in r.stdout and " of 1 repeats fell inside the quoted " in r.stdout, r.stdout[-1500:]
    j = run_maxcode(["check", "ref.py", "good.cpp", "--repeat", "1", "--time-budget", "0.05", "--json"], cwd=tmp_path)
    (v,) = j.verdicts
    assert v["diagnostics"]["repeats"]["n"] == 1 and len(v["diagnostics"]["repeats"]["speedups"]) == 1
