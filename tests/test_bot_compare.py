"""``maxcode compare``: real pytest-benchmark runs of a real 20% slowdown and of unchanged code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_maxcode

from pytest_maxcode.bot.compare import (
    Timings,
    _holm,
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
    assert benchmark(work, {n}) > 0


def test_steady(benchmark):
    assert benchmark(work, 2000) > 0
'''


def bench(path: Path, n: int, out: str) -> Path:
    (path / "test_bench.py").write_text(BENCH.format(n=n))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-only", f"--benchmark-json={out}",
         "--benchmark-save-data", "--benchmark-max-time=0.5", "test_bench.py"],
        cwd=path, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    return path / out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Base, the same code again, and a head doing 20% more work in test_work."""
    path = tmp_path_factory.mktemp("bench")
    bench(path, 2000, "base.json")
    bench(path, 2000, "same.json")
    bench(path, 2400, "slow.json")
    return path


def test_a_real_20_percent_slowdown_is_flagged_and_fails_when_asked(runs: Path) -> None:
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
    assert bad.stderr == "maxcode: error: [tool.maxcode.regressions] threshold must be a fraction such as 0.1 (10%), not 'ten'\n"


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
    assert _holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
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
