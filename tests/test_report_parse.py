"""A report is read once, where it enters (issue 16): ``parse_report`` gives the typed
:class:`Report` its consumers (apply, the bot, remeasure) read by attribute; a report read and
written back is the JSON that was read; a malformed one is one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_maxcode.apply import apply_report
from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.model.report import ReferenceInfo, Report, TargetStatus, parse_report

TARGET = {
    "id": "m.f", "status": "verified", "reason": "2x faster", "speedup": 2.0, "speedup_ci": [1.8, 2.2],
    "verified": True, "weak_check": False, "baseline_s": 1e-3, "best_s": 5e-4, "workloads": [],
    "candidates": {"tried": 1, "correct": 1, "faster": 1, "failed": {}},
    "best": {"source_path": "k.cpp", "hash": "h", "lang": "cpp", "origin": "seed:k.cpp", "params": {}},
    "tests": {"rerun": [], "passed": True, "summary": "1 passed"}, "benchmarks": [], "trajectory": [], "elapsed_s": 1.0,
    "device": "cpu", "reference": {"module": "m", "qualname": "f", "file": "m.py"},
}
REPORT = {"schema_version": 1, "tool_version": "0", "created_at": "now", "machine": {"cpu": "x"},
          "options": {"min_speedup": 1.05}, "targets": [TARGET], "ci": {"job": "build"}}


def test_a_report_read_and_written_back_is_the_same_json() -> None:
    report = parse_report(json.loads(json.dumps(REPORT)))
    t = report.targets[0]
    assert t.status is TargetStatus.VERIFIED and t.best is not None and t.best.source_path == "k.cpp"
    assert isinstance(t.reference, ReferenceInfo) and (t.reference.file, t.reference.qualname) == ("m.py", "f")
    assert not t.reference.program and report.machine == {"cpu": "x"} and report.extra == {"ci": {"job": "build"}}
    assert report.to_json() == REPORT
    assert parse_report(report) is report  # a Report is taken as it is


def test_a_partial_report_reads_with_what_it_has() -> None:
    report = parse_report({"targets": [{"id": "m.f", "status": "skipped"}]})
    assert isinstance(report, Report) and report.machine == {} and report.targets[0].reference is None


@pytest.mark.parametrize(("data", "why"), [
    ([], "(root): not an object but list"),
    ({"targets": {"m.f": {}}}, "targets: not a list but dict"),
    ({"targets": [{"status": "verified"}]}, "targets/0: a target needs a string id"),
    ({"targets": [{"id": "m.f"}]}, "targets/0 (m.f): no status"),
    ({"targets": [{"id": "m.f", "status": "great"}]}, "targets/0 (m.f): unknown target status 'great'"),
])
def test_a_malformed_report_is_one_line_naming_the_file(data: object, why: str) -> None:
    with pytest.raises(MaxcodeError) as e:
        parse_report(data, "r.json")  # type: ignore[arg-type]
    assert str(e.value) == f"r.json: not a maxcode report ({why})"
    with pytest.raises(MaxcodeError, match="not a maxcode report"):
        apply_report(data, Path("."))  # type: ignore[arg-type]
