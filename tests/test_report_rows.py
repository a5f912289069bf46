"""The report's nested rows are types (issue 16): a row read from a report of another version and
written back is the row that was read; rows given as dicts become types; the renderers read them."""

from __future__ import annotations

import json

from pytest_maxcode.model.report import (
    Evaluation,
    Remeasure,
    TargetResult,
    TargetStatus,
    WorkloadResult,
    rows_of,
)

#: a trajectory row as a version before search trees wrote it (no depth, no parent), with a key
#: a newer version (or a plugin) added
OLD_ROW = {"index": 1, "hash": "ab" * 32, "origin": "seed:fused.cpp", "status": "faster", "speedup": 3.2,
           "speedup_ci": [2.9, 3.5], "from_the_future": {"x": 1}}


def test_an_older_row_round_trips_unchanged_with_unknown_keys_kept() -> None:
    row = Evaluation.from_json(OLD_ROW)
    assert row.speedup == 3.2 and row.speedup_ci == [2.9, 3.5] and row.extra == {"from_the_future": {"x": 1}}
    assert not row.given("depth") and not row.given("parent") and row.given("speedup")
    assert row.to_json() == OLD_ROW  # no key added (an added depth would draw a search tree), none lost


def test_a_target_read_and_written_back_is_the_same_json() -> None:
    target = {"id": "m.f", "status": "verified", "reason": "", "speedup": 3.2, "speedup_ci": [2.9, 3.5],
              "verified": True, "weak_check": False, "baseline_s": 1e-3, "best_s": 3e-4,
              "workloads": [{"name": "w0", "speedup": 3.2, "a_newer_key": True}],
              "candidates": {"tried": 2, "correct": 1, "faster": 1, "failed": {"wrong": 1}},
              "tests": {"rerun": ["t.py::test_f"], "passed": True, "summary": "1 passed"},
              "best": None, "benchmarks": [], "trajectory": [OLD_ROW], "elapsed_s": 1.5,
              "remeasure": {"command": "maxcode check --repeat 5", "expect": [2.9, 3.5]}, "plugin_key": [1, 2]}
    t = TargetResult.from_json(json.loads(json.dumps(target)))
    assert isinstance(t.workloads[0], WorkloadResult) and isinstance(t.trajectory[0], Evaluation)
    assert isinstance(t.remeasure, Remeasure) and t.remeasure.expect == [2.9, 3.5]
    assert t.to_json() == target


def test_rows_given_as_dicts_become_types() -> None:
    t = TargetResult("m.f", TargetStatus.NO_SPEEDUP, trajectory=[OLD_ROW], remeasure={"command": "c", "expect": [1, 2]})
    assert isinstance(t.trajectory[0], Evaluation) and t.trajectory[0].origin == "seed:fused.cpp"
    assert isinstance(t.remeasure, Remeasure) and t.remeasure.command == "c"
    t.workloads = [{"name": "w1"}]
    assert isinstance(t.workloads[0], WorkloadResult) and t.workloads[0].name == "w1"


def test_a_damaged_list_of_rows_renders_what_it_can() -> None:
    rows = rows_of(Evaluation, [OLD_ROW, "not a row", 7, {"index": 2, "status": "wrong"}])
    assert [r.index for r in rows] == [1, 2]
    assert rows_of(Evaluation, None) == [] and rows_of(Evaluation, {"index": 1}) == []
