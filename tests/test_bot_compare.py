"""``maxcode compare``: its statistics on benchmark files written here from seeded draws (a 20%
slowdown, and the same code measured twice), so no verdict depends on how loaded this machine
is; and a real pytest-benchmark run, to read the file format it really writes."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_maxcode

from pytest_maxcode.bot.compare import (
    Timings,
    holm,
    compare,
    load_timings,
    thresholds_from,
)
from pytest_maxcode.errors import MaxcodeError

BENCH = '''
def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def test_work(benchmark):
    assert benchmark(work, 2000) > 0


def test_steady(benchmark):
    assert benchmark(work, 2000) > 0
'''


def rounds(seed: int, median_s: float, n: int = 400) -> list[float]:
    """Per-round times shaped like a real run's: a skewed body around ``median_s`` and a few
    rounds an interruption made two or three times longer."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = median_s * rng.lognormvariate(0.0, 0.05)
        if rng.random() < 0.01:
            t *= rng.uniform(1.5, 3.0)
        out.append(t)
    return out


def stats_of(data: list[float]) -> dict:
    """pytest-benchmark's ``stats`` for raw per-round times (``--benchmark-save-data``)."""
    return {"min": min(data), "max": max(data), "mean": statistics.fmean(data), "stddev": statistics.stdev(data),
            "median": statistics.median(data), "rounds": len(data), "iterations": 1, "data": data}


def write_bench(path: Path, runs: dict[str, list[float]]) -> Path:
    """A pytest-benchmark JSON file (the fields ``maxcode compare`` reads) with these raw timings."""
    benchmarks = [{"group": None, "name": name.split("::")[-1], "fullname": name, "params": None, "stats": stats_of(data)}
                  for name, data in runs.items()]
    path.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": benchmarks, "version": "5.1.0"}))
    return path


WORK, STEADY = "test_bench.py::test_work", "test_bench.py::test_steady"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Base, the same code measured again (fresh draws from the same distribution), and a head
    whose test_work is 20% slower."""
    path = tmp_path_factory.mktemp("bench")
    write_bench(path / "base.json", {WORK: rounds(1, 100e-6), STEADY: rounds(2, 80e-6)})
    write_bench(path / "same.json", {WORK: rounds(3, 100e-6), STEADY: rounds(4, 80e-6)})
    write_bench(path / "slow.json", {WORK: rounds(5, 120e-6), STEADY: rounds(6, 80e-6)})
    return path


def test_a_real_pytest_benchmark_file_is_read_with_its_raw_timings(tmp_path: Path) -> None:
    """One real run; its head is the same file with test_work's every round 1.5x longer, so the
    verdicts are the statistics' own, not this machine's load."""
    (tmp_path / "test_bench.py").write_text(BENCH)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-only", "--benchmark-json=real.json",
         "--benchmark-save-data", "--benchmark-max-time=0.5", "--benchmark-min-rounds=50", "test_bench.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    real = load_timings(tmp_path / "real.json")
    assert set(real) == {WORK, STEADY}
    assert all(t.data and len(t.data) == t.rounds >= 50 and t.median_s > 0 for t in real.values())
    write_bench(tmp_path / "head.json", {WORK: [x * 1.5 for x in real[WORK].data], STEADY: real[STEADY].data})
    r = run_maxcode(["compare", "real.json", "head.json", "--json", "cmp.json", "--fail-on-regression"], cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    by = {c["name"]: c for c in json.loads((tmp_path / "cmp.json").read_text())["comparisons"]}
    assert by[WORK]["verdict"] == "regressed" and by[WORK]["change"] == pytest.approx(0.5)
    assert by[STEADY]["verdict"] == "unchanged" and by[STEADY]["change"] == pytest.approx(0.0, abs=1e-12)


def test_a_20_percent_slowdown_is_flagged_and_fails_when_asked(runs: Path) -> None:
    r = run_maxcode(["compare", "base.json", "slow.json", "--json", "out/cmp.json", "--markdown", "out/cmp.md",
                     "--fail-on-regression"], cwd=runs)
    assert r.returncode == 1, r.stderr
    data = json.loads((runs / "out" / "cmp.json").read_text())
    assert data["regressions"] == 1
    by = {c["name"]: c for c in data["comparisons"]}
    work, steady = by["test_bench.py::test_work"], by["test_bench.py::test_steady"]
    assert work["verdict"] == "regressed" and work["method"] == "mann-whitney" and work["p_value"] < 0.05
    assert 0.12 < work["change"] < 0.30 and work["change_ci"][0] <= work["change"] <= work["change_ci"][1]
    assert steady["verdict"] == "unchanged"
    assert r.stdout == (runs / "out" / "cmp.md").read_text()
    assert "**1 regression** in 2 benchmark(s)" in r.stdout and "| `test_bench.py::test_work` |" in r.stdout


def test_two_runs_of_the_same_code_are_not_a_regression(runs: Path) -> None:
    r = run_maxcode(["compare", "base.json", "same.json", "--json", "cmp.json", "--fail-on-regression"], cwd=runs)
    assert r.returncode == 0, r.stdout
    data = json.loads((runs / "cmp.json").read_text())
    assert data["regressions"] == 0 and {c["verdict"] for c in data["comparisons"]} <= {"unchanged", "improved"}
    assert all(abs(c["change"]) < 0.10 for c in data["comparisons"])
    assert "**No regressions** in 2 benchmark(s)" in r.stdout


def test_without_raw_timings_the_intervals_decide(runs: Path) -> None:
    for name in ("base", "slow"):
        d = json.loads((runs / f"{name}.json").read_text())
        for b in d["benchmarks"]:
            b["stats"].pop("data")
        (runs / f"{name}-stats.json").write_text(json.dumps(d))
    r = run_maxcode(["compare", "base-stats.json", "slow-stats.json", "--json", "cmp-stats.json"], cwd=runs)
    assert r.returncode == 0
    work = next(c for c in json.loads((runs / "cmp-stats.json").read_text())["comparisons"] if c["name"].endswith("test_work"))
    assert work["method"] == "intervals" and work["p_value"] is None and work["verdict"] == "regressed"


def test_per_benchmark_thresholds_come_from_pyproject(runs: Path, tmp_path: Path) -> None:
    for name in ("base.json", "slow.json"):
        (tmp_path / name).write_text((runs / name).read_text())
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode.regressions]\nthreshold = 0.1\n\n'
                                             '[tool.maxcode.regressions.thresholds]\n"test_work*" = 0.5\n')
    r = run_maxcode(["compare", "base.json", "slow.json", "--json", "cmp.json", "--fail-on-regression"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout
    work = next(c for c in json.loads((tmp_path / "cmp.json").read_text())["comparisons"] if c["name"].endswith("test_work"))
    assert work["threshold"] == 0.5 and work["verdict"] == "unchanged" and work["p_value"] < 0.05
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode.regressions]\nthreshold = "ten"\n')
    bad = run_maxcode(["compare", "base.json", "slow.json"], cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("maxcode: error: ") and "pyproject.toml" in bad.stderr
    assert bad.stderr.endswith("[tool.maxcode.regressions] threshold must be a fraction such as 0.1 (10%), not 'ten'\n")


def test_inputs_that_are_not_benchmarks_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    (tmp_path / "y.json").write_text("not json")
    with pytest.raises(MaxcodeError, match=r"x.json: neither a pytest-benchmark JSON file"):
        load_timings(tmp_path / "x.json")
    with pytest.raises(MaxcodeError, match=r"y.json: not a JSON file"):
        load_timings(tmp_path / "y.json")
    r = run_maxcode(["compare", "x.json", "missing.json"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_maxcode_reports_compare_the_users_own_code(tmp_path: Path) -> None:
    def report(median: float) -> dict:
        return {"targets": [{"benchmarks": [{"name": "t.py::test_gelu", "speedup": 2.0,
                                             "reference": {"median_s": median, "mean_s": median, "stddev_s": median * 0.01, "rounds": 100},
                                             "candidate": {"median_s": median / 2, "mean_s": median / 2, "stddev_s": 0.0, "rounds": 100}}]}]}
    (tmp_path / "a.json").write_text(json.dumps(report(1e-3)))
    (tmp_path / "b.json").write_text(json.dumps(report(1.3e-3)))
    result = compare(load_timings(tmp_path / "a.json"), load_timings(tmp_path / "b.json"))
    (c,) = result.comparisons
    assert c.name == "t.py::test_gelu" and c.change == pytest.approx(0.3) and c.verdict == "regressed"


def test_holm_adjusts_many_p_values_and_thresholds_validate() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert thresholds_from(None) == (0.1, {})
    with pytest.raises(MaxcodeError, match="has no setting 'limit'"):
        thresholds_from({"limit": 1})
    # a shift that is significant alone (p = 0.026) is not, among 20 benchmarks compared at once
    t = lambda name, xs: Timings(name, sorted(xs)[len(xs) // 2], sum(xs) / len(xs), 0.0, len(xs), list(xs))  # noqa: E731
    base = {f"b{i}": t(f"b{i}", [1.0 + 0.001 * j for j in range(50)]) for i in range(20)}
    head = {f"b{i}": t(f"b{i}", [1.0 + 0.001 * j + (0.006 if i == 0 else 0.0) for j in range(50)]) for i in range(20)}
    alone = compare({"b0": base["b0"]}, {"b0": head["b0"]}, threshold=0.001)
    assert alone.regressions and alone.comparisons[0].p_value == pytest.approx(0.026, abs=0.002)
    many = compare(base, head, threshold=0.001)
    assert many.regressions == [] and many.comparisons[0].p_value == pytest.approx(20 * 0.0261, abs=0.04)
