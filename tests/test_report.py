"""The report package: schema, validation, and the three files a run leaves behind."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pytest_maxcode.report import (
    SCHEMA_PATH,
    load_schema,
    render_html,
    render_markdown,
    render_terminal,
    validate,
    write_reports,
)
from pytest_maxcode.report._format import fmt_candidates, fmt_speedup, fmt_tests, fmt_time
from pytest_maxcode.report._markdown import summary_header

needs_jsonschema = pytest.mark.skipif(
    importlib.util.find_spec("jsonschema") is None, reason="validation needs jsonschema (pip install jsonschema)"
)


def sample_report() -> dict[str, Any]:
    """A realistic run: one verified target after a search with failures, one skipped target."""
    trajectory = [
        {"index": 0, "hash": "a1b2c3d4e5f6a7b8", "origin": "seed", "status": "not_faster", "speedup": 0.97, "best_so_far": 0.97},
        {"index": 1, "hash": "b2c3d4e5f6a7b8c9", "origin": "llm", "status": "compile_error", "speedup": None, "best_so_far": 0.97},
        {"index": 2, "hash": "c3d4e5f6a7b8c9d0", "origin": "llm", "status": "faster", "speedup": 1.62, "best_so_far": 1.62},
        {"index": 3, "hash": "d4e5f6a7b8c9d0e1", "origin": "llm", "status": "wrong", "speedup": None, "best_so_far": 1.62},
        {"index": 4, "hash": "e5f6a7b8c9d0e1f2", "origin": "tune", "status": "faster", "speedup": 2.31, "best_so_far": 2.31},
        {"index": 5, "hash": "f6a7b8c9d0e1f2a3", "origin": "llm", "status": "timeout", "speedup": None, "best_so_far": 2.31},
    ]
    verified = {
        "id": "mylib.chain",
        "status": "verified",
        "reason": "2.31x faster on all 2 workloads, 95% CI above the 1.05x bar; 4 tests pass",
        "speedup": 2.31,
        "speedup_ci": [2.10, 2.52],
        "verified": True,
        "weak_check": False,
        "baseline_s": 3.2e-3,
        "best_s": 1.385e-3,
        "workloads": [
            {"name": "small", "signature": "x: float32[64, 128]", "n_sets": 5, "speedup": 2.05, "speedup_ci": [1.9, 2.2],
             "reference_s": 4.1e-4, "candidate_s": 2.0e-4},
            {"name": "large", "signature": "x: float32[4096, 4096]", "n_sets": 3, "speedup": 2.6, "speedup_ci": [2.3, 2.9],
             "reference_s": 2.5e-2, "candidate_s": 9.6e-3},
        ],
        "candidates": {"tried": 6, "correct": 3, "faster": 2, "failed": {"wrong": 1, "compile_error": 1, "timeout": 1}},
        "best": {"source_path": ".maxcode/mylib.chain/e5f6a7b8.cu", "hash": "e5f6a7b8c9d0e1f2", "lang": "cuda",
                 "origin": "tune", "params": {"BLOCK": 256, "unroll": 4, "layout": "nhwc"}},
        "tests": {"rerun": ["tests/test_chain.py::test_a", "tests/test_chain.py::test_b",
                            "tests/test_chain.py::test_c[1]", "tests/test_chain.py::test_c[2]"],
                  "passed": True, "summary": "4 passed"},
        "benchmarks": [
            {"name": "tests/bench.py::test_chain_bench",
             "reference": {"median_s": 3.1e-3, "mean_s": 3.2e-3, "stddev_s": 1.1e-4, "rounds": 200},
             "candidate": {"median_s": 1.35e-3, "mean_s": 1.4e-3, "stddev_s": 5e-5, "rounds": 400},
             "speedup": 2.3},
        ],
        "trajectory": trajectory,
        "elapsed_s": 412.5,
    }
    skipped = {
        "id": "mylib.tiny",
        "status": "skipped",
        "reason": "the reference takes 80 ns: below the timer's resolution",
        "speedup": None,
        "speedup_ci": None,
        "verified": False,
        "weak_check": True,
        "baseline_s": 8e-8,
        "best_s": None,
        "workloads": [],
        "candidates": {"tried": 0, "correct": 0, "faster": 0, "failed": {}},
        "best": None,
        "tests": {"rerun": [], "passed": None, "summary": ""},
        "benchmarks": [],
        "trajectory": [],
        "elapsed_s": 0.4,
    }
    return {
        "schema_version": 1,
        "tool_version": "0.1.0",
        "created_at": "2026-11-21T17:00:00+0000",
        "machine": {"host": "ci-runner-7", "cpu": "AMD EPYC 9454", "cores": "16", "torch": "2.5.1",
                    "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"},
        "options": {"budget": 40, "time": None, "policy": "default", "min_speedup": 1.05, "device": "cuda", "apply": False},
        "targets": [verified, skipped],
    }


# -- schema and validation -------------------------------------------------------------------------


@needs_jsonschema
def test_schema_is_draft_2020_12_with_id() -> None:
    schema = load_schema()
    assert SCHEMA_PATH.name == "schema.json" and SCHEMA_PATH.is_file()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == "https://pytest-maxcode.dev/schema/report-v1.json"
    assert schema["title"] and schema["description"]
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)


@needs_jsonschema
def test_sample_report_is_valid() -> None:
    report = sample_report()
    assert validate(report) == []
    assert json.loads(json.dumps(report)) == report  # already JSON-serializable


@needs_jsonschema
def test_missing_id_and_bad_status_are_reported() -> None:
    report = sample_report()
    del report["targets"][0]["id"]
    report["targets"][1]["status"] = "great"
    errors = validate(report)
    assert any(e.startswith("targets/0") and "'id' is a required property" in e for e in errors), errors
    assert any(e.startswith("targets/1/status") and "great" in e for e in errors), errors


@needs_jsonschema
@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(schema_version=2),
        lambda r: r["machine"].update(device="tpu"),
        lambda r: r["options"].pop("budget"),
        lambda r: r["targets"][0].update(speedup_ci=[1.0]),
        lambda r: r["targets"][0]["candidates"]["failed"].update(segfault=1),
        lambda r: r["targets"][0]["trajectory"][0].update(status="ok"),
        lambda r: r["targets"][0]["best"].update(lang="rust"),
        lambda r: r["targets"][0]["tests"].update(passed="yes"),
        lambda r: r["targets"][0]["benchmarks"][0]["reference"].pop("rounds"),
        lambda r: r["targets"][0]["workloads"][0].pop("signature"),
    ],
)
def test_each_required_field_and_enum_is_enforced(mutate: Any) -> None:
    report = sample_report()
    mutate(report)
    assert validate(report)


@needs_jsonschema
def test_extra_fields_are_allowed_for_later_versions() -> None:
    report = sample_report()
    report["new_top_level"] = {"anything": 1}
    report["machine"]["numa"] = "2 nodes"
    report["targets"][0]["new_field"] = [1, 2, 3]
    report["targets"][0]["trajectory"][0]["compile_s"] = 1.2
    assert validate(report) == []


def test_validate_without_jsonschema_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    with pytest.raises(ImportError, match="pip install jsonschema"):
        validate(sample_report())


# -- cell formatting -------------------------------------------------------------------------------


def test_cell_formats() -> None:
    assert fmt_time(None) == "-"
    assert fmt_time(1.5) == "1.5 s"
    assert fmt_time(3.2e-3) == "3.2 ms"
    assert fmt_time(4.1e-6) == "4.1 us"
    assert fmt_time(8e-8) == "80 ns"
    assert fmt_speedup(2.31, [2.1, 2.52]) == "2.31x [2.10, 2.52]"
    assert fmt_speedup(2.31, None) == "2.31x"
    assert fmt_speedup(None, None) == "-"
    assert fmt_candidates({"tried": 12, "correct": 7, "faster": 3, "failed": {"compile_error": 2, "wrong": 3}}) == (
        "12 / 7 / wrong 3, compile_error 2"
    )
    assert fmt_tests({"rerun": ["a", "b"], "passed": False, "summary": ""}) == "2 failed"
    assert fmt_tests({"rerun": [], "passed": None, "summary": ""}) == "-"


# -- files -----------------------------------------------------------------------------------------


def test_write_reports_creates_three_files(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "maxcode-report"
    paths = write_reports(sample_report(), out)
    assert set(paths) == {"json", "markdown", "html"}
    assert {p.name for p in paths.values()} == {"report.json", "summary.md", "report.html"}
    for p in paths.values():
        assert p.is_file() and p.parent == out and p.stat().st_size > 0
    assert json.loads(paths["json"].read_text(encoding="utf-8")) == sample_report()
    assert sorted(x.name for x in out.iterdir()) == ["report.html", "report.json", "summary.md"]  # no temp files left
    # writing again replaces the files in place
    paths2 = write_reports(sample_report(), out)
    assert paths2 == paths


def test_write_reports_turns_nan_into_null(tmp_path: Path) -> None:
    report = sample_report()
    report["targets"][0]["trajectory"][0]["speedup"] = float("nan")
    paths = write_reports(report, tmp_path)
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["targets"][0]["trajectory"][0]["speedup"] is None


def test_markdown_has_summary_table_and_sections() -> None:
    md = render_markdown(sample_report())
    assert summary_header() in md
    assert md.count(summary_header()) == 1
    assert summary_header().startswith("| target | workloads | baseline | best | speedup | verdict |")
    assert "2.31x [2.10, 2.52]" in md
    assert "| 6 / 3 / wrong 1, compile\\_error 1, timeout 1 |" in md
    assert "| 4 passed |" in md
    assert "## mylib.chain" in md and "## mylib.tiny" in md
    assert "skipped (weak check)" in md
    assert "below the timer's resolution" in md
    assert "### Workloads" in md and "### Benchmarks" in md
    assert "reference median | candidate median" in md
    assert "3.1 ms" in md and "1.35 ms" in md


def test_markdown_cells_cannot_break_the_table() -> None:
    report = sample_report()
    report["targets"][0]["id"] = "evil|id\n<b>x</b>"
    md = render_markdown(report)
    row = next(line for line in md.splitlines() if "evil" in line and line.startswith("| "))
    assert "evil\\|id &lt;b&gt;x&lt;/b&gt;" in row
    assert row.count(" | ") == len(summary_header().split(" | ")) - 1


def test_html_is_self_contained_with_plots() -> None:
    page = render_html(sample_report())
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page must not load anything"
    sections = page.split("<section ")[1:]
    assert len(sections) == 2
    verified, skipped = sections
    assert "mylib.chain" in verified and "<polyline" in verified
    assert verified.count('<circle cx=') >= 6  # one dot per evaluation (plus legend)
    assert 'stroke-dasharray' in verified  # the 1.0x and min-speedup lines
    assert "min 1.05x" in verified
    assert "mylib.tiny" in skipped and "no evaluations" in skipped and "<polyline" not in skipped
    assert "2.31x [2.10, 2.52]" in page


def test_html_escapes_untrusted_text() -> None:
    report = sample_report()
    report["targets"][0]["id"] = "<script>alert(1)</script>"
    report["targets"][0]["reason"] = 'quote " and <img src=x onerror=alert(2)>'
    report["targets"][0]["trajectory"][1]["origin"] = "<script>"
    page = render_html(report)
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page


def test_html_plot_copes_with_one_evaluation_and_no_correct_one() -> None:
    report = sample_report()
    t = report["targets"][0]
    t["trajectory"] = [{"index": 0, "hash": "x", "origin": "llm", "status": "crash", "speedup": None, "best_so_far": None}]
    page = render_html(report)
    assert "<svg" in page and 'data-status="crash"' in page


# -- terminal --------------------------------------------------------------------------------------


def test_terminal_table_shows_targets_and_verdicts() -> None:
    console = Console(record=True, width=200)
    render_terminal(sample_report(), console)
    text = console.export_text()
    assert "mylib.chain" in text and "mylib.tiny" in text
    assert "verified" in text and "skipped (weak check)" in text
    assert "2.31x [2.10, 2.52]" in text
    assert "6 / 3 / wrong 1, compile_error 1, timeout 1" in text
    assert "4 passed" in text


def test_terminal_does_not_interpret_markup_in_ids() -> None:
    report = copy.deepcopy(sample_report())
    report["targets"][0]["id"] = "mylib.[bold]x[/bold]"
    console = Console(record=True, width=200)
    render_terminal(report, console)
    assert "mylib.[bold]x[/bold]" in console.export_text()
