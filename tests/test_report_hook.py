"""The report is built from typed records and checked against its schema, and plugins add to it
through ``pytest_maxcode_report`` (pytest-benchmark's ``update_json`` pattern)."""

from __future__ import annotations

import json

import pytest
from test_first_hour import make_project, output, run

from pytest_maxcode.model.report import (
    BestKernel,
    Report,
    RerunResult,
    TargetResult,
    TargetStatus,
)
from pytest_maxcode.report import validate

HOOKS = '''
def pytest_maxcode_report(report, config):
    report["ci"] = {"job": "nightly", "targets_seen": len(report["targets"])}
    for t in report["targets"]:
        t["owner"] = "team-kernels"
'''

BREAKING = '''
def pytest_maxcode_report(report, config):
    report["targets"][0]["status"] = "splendid"
'''


def test_a_plugin_adds_to_the_report_and_it_still_matches_the_schema(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    pytester.makeconftest(HOOKS)
    result = run(pytester, "--maxcode")
    assert result.ret == 0, output(result)[-3000:]
    report = json.loads((pytester.path / ".maxcode" / "reports" / "report.json").read_text())
    assert report["ci"] == {"job": "nightly", "targets_seen": 2}
    assert [t["owner"] for t in report["targets"]] == ["team-kernels", "team-kernels"]
    assert validate(report) == []
    assert "does not match its schema" not in output(result)


def test_a_plugin_that_breaks_the_schema_is_named_in_one_line(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    pytester.makeconftest(BREAKING)
    result = run(pytester, "--maxcode")
    lines = [line for line in output(result).splitlines() if "does not match its schema" in line]
    assert len(lines) == 1 and "pytest_maxcode_report" in lines[0] and "splendid" in lines[0], output(result)[-3000:]
    assert "Traceback" not in output(result)


def test_a_target_result_round_trips_through_json_keeping_keys_it_does_not_know() -> None:
    t = TargetResult("lib.f", TargetStatus.VERIFIED, "1.9x faster", kind="function", speedup=1.9, speedup_ci=[1.7, 2.1],
                     verified=True, best=BestKernel("k.cpp", "abc", "cpp", "seed:k.cpp", {"UNROLL": 4}),
                     tests=RerunResult(["t.py::test_f"], True, "1 passed", kernel_calls=3), elapsed_s=1.5)
    data = t.to_json()
    data["plugin_key"] = {"x": 1}
    again = TargetResult.from_json(data)
    assert again.status is TargetStatus.VERIFIED and again.best == t.best and again.tests == t.tests
    assert again.to_json() == data
    report = Report("0.0", "2026-11-24T00:00:00+0000", {"host": "h", "cpu": "c", "cores": "2", "torch": "2", "device": "cpu"},
                    {"budget": 1, "time": None, "min_speedup": 1.05, "apply": False, "policy": "builtin", "device": "cpu"},
                    [again]).to_json()
    assert validate(report) == [], validate(report)


def test_a_target_status_outside_the_schema_is_refused_when_set() -> None:
    t = TargetResult.skipped("lib.f", "not called", [])
    with pytest.raises(ValueError, match="unknown target status 'splendid'"):
        t.status = "splendid"  # type: ignore[assignment]
    assert t.to_json()["status"] == "skipped"
