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


def test_a_reproduce_line_keeps_the_spaces_around_its_command() -> None:
    from pytest_maxcode.report._markdown import _code_spans

    line = "k 4.28x [3.56, 5.14]: re-measure with `maxcode remeasure k --repeat 5` (each repeat should land in [3.56, 5.14])"
    assert _code_spans(line) == ("k 4.28x [3.56, 5.14]: re-measure with `maxcode remeasure k --repeat 5` "
                                 "(each repeat should land in [3.56, 5.14])")
    assert _code_spans("`maxcode check a.cpp` *then*") == "`maxcode check a.cpp` \\*then\\*"


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


def test_terminal_table_fits_80_columns_without_splitting_words() -> None:
    report = copy.deepcopy(sample_report())
    noisy = copy.deepcopy(report["targets"][0])
    noisy.update(id="mypackage.submodule.a_rather_long_function_name", status="no_speedup", weak_check=False,
                 speedup=1.04, speedup_ci=[0.26, 4.65], tests={"rerun": [], "passed": None, "summary": ""})
    report["targets"].append(noisy)
    console = Console(record=True, width=80)
    render_terminal(report, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    rows = [line for line in lines if line.startswith("  my")]
    assert len(rows) == 3  # one line per target: nothing in a row wrapped
    assert "verified" in rows[0] and "2.31x [2.10, 2.52]" in rows[0] and "4 passed" in rows[0]
    assert "skipped" in rows[1]
    assert "no_speedup" in rows[2] and "1.04x [0.26, 4.65]" in rows[2] and "mypackage.su…" in rows[2]
    assert "mypackage.submodule.a_rather_long_function_name: " in text  # in full below the table
    assert "too noisy to decide: 1 target(s)" in text


def test_terminal_does_not_interpret_markup_in_ids() -> None:
    report = copy.deepcopy(sample_report())
    report["targets"][0]["id"] = "mylib.[bold]x[/bold]"
    console = Console(record=True, width=200)
    render_terminal(report, console)
    assert "mylib.[bold]x[/bold]" in console.export_text()


# -- search trees and strategy curves ---------------------------------------------------------------


def tree_report() -> dict[str, Any]:
    """The sample run as a tree search: parents, steps, rewards, a format failure, and curves per strategy."""
    from pytest_maxcode.report.tree import curves_by_strategy

    report = sample_report()
    t = report["targets"][0]
    parents = [None, 0, 0, 2, 2, 4]
    for e, parent in zip(t["trajectory"], parents):
        depth = 0 if parent is None else t["trajectory"][parent]["depth"] + 1
        e.update(node=100 + e["index"], parent=parent, depth=depth, step=depth, strategy="greedy",
                 reward=e["speedup"] if e["status"] in ("faster", "not_faster") else -0.5)
    t["trajectory"].append({"index": 6, "hash": None, "origin": "anthropic:claude-test", "status": "format", "speedup": None,
                            "best_so_far": 2.31, "node": 106, "parent": 4, "depth": 3, "step": 3, "reward": -1.0,
                            "strategy": "greedy", "reasons": ["the reply has no code block"]})

    def node(i: int, run: int, strategy: str, status: str, speedup: float | None = None) -> dict[str, Any]:
        return {"id": i, "run_id": run, "strategy": strategy, "status": status, "speedup": speedup, "parent_id": None}

    store_nodes = [node(100 + e["index"], 3, "greedy", e["status"], e["speedup"]) for e in t["trajectory"]]
    store_nodes += [node(1, 1, "sweep", "faster", 1.3), node(2, 1, "sweep", "wrong"),
                    node(50, 2, "greedy", "not_faster", 0.9), node(51, 2, "greedy", "faster", 1.4)]
    curves = curves_by_strategy(store_nodes)
    assert list(curves) == ["sweep", "greedy (run 2)", "greedy (run 3)"]
    t["search"] = {"strategy": "greedy", "policy": "llm", "llm": "anthropic:claude-test", "observation": "feedback",
                   "stop_reason": "budget of 7 evaluations spent", "llm_calls": 6, "tokens": 12345, "cost_usd": 0.0623,
                   "evaluations": 7, "curves": curves}
    return report


@needs_jsonschema
def test_tree_report_is_valid_and_old_reports_still_are() -> None:
    assert validate(tree_report()) == []
    assert validate(sample_report()) == []  # none of the new fields is required


@needs_jsonschema
@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t["search"].pop("curves"),
        lambda t: t["search"].update(cost_usd=-1),
        lambda t: t["search"]["curves"].update(bad=[[1]]),
        lambda t: t["search"]["curves"].update(bad=[[1, "fast"]]),
        lambda t: t["trajectory"][1].update(parent=-1),
        lambda t: t["trajectory"][1].update(depth="1"),
        lambda t: t["trajectory"][1].update(status="formatted"),
    ],
)
def test_new_fields_are_typed(mutate: Any) -> None:
    report = tree_report()
    mutate(report["targets"][0])
    assert validate(report)


def test_html_draws_the_tree_and_one_curve_per_strategy() -> None:
    report = tree_report()
    page = render_html(report)
    assert "<script" not in page.lower()
    verified, skipped = page.split("<section ")[1:]
    assert "Search tree" in verified and "Search tree" not in skipped  # no tree fields, no tree
    tree = verified[verified.index('<svg xmlns="http://www.w3.org/2000/svg" class="search-tree"'):]
    tree = tree[: tree.index("</svg>")]
    trajectory = report["targets"][0]["trajectory"]
    dots = re.findall(r'<circle [^>]*data-status="([a-z_]+)"[^>]*><title>([^<]*)</title>', tree)
    assert [s for s, _ in dots] == [e["status"] for e in trajectory]  # parents before children: same order here
    assert tree.count("<line ") == len(trajectory)  # one edge per evaluation: from its parent, or from the reference
    assert tree.count('data-best="1"') == 1
    best_tip = next(tip for s, tip in dots if "(best)" in tip)
    assert best_tip.startswith("#4 (node 104) faster, speedup 2.31x") and "origin tune" in best_tip
    assert "format, speedup -" in dots[-1][1] and "the reply has no code block" in dots[-1][1]
    assert "best 2.31x" in tree and ">format<" in tree and ">compile_error<" in tree  # label and legend
    # children sit one row below their parent
    ys = [float(m) for m in re.findall(r'<circle cx="[0-9.]+" cy="([0-9.]+)" r="[0-9.]+" fill="#[0-9a-f]+" stroke', tree)]
    rows = sorted(set(ys[: len(trajectory)]))
    assert [rows.index(y) for y in ys[: len(trajectory)]] == [e["depth"] for e in trajectory]

    curves = verified[verified.index('class="curves"'):]
    curves = curves[: curves.index("</svg>")]
    labels = re.findall(r'data-curve="([^"]*)"', curves)
    assert labels == ["sweep", "greedy (run 2)", "greedy (run 3)"]
    assert "sweep: best 1.30x at evaluation 1 of 2" in curves
    assert "greedy (run 3): best 2.31x at evaluation 5 of 7" in curves
    assert "Best so far by strategy" not in skipped


def test_html_tree_copes_with_wide_deep_and_broken_trees() -> None:
    report = tree_report()
    t = report["targets"][0]
    wide = [{"index": i, "hash": f"h{i}", "origin": "seed", "status": "faster" if i % 3 else "wrong",
             "speedup": 1 + i / 100 if i % 3 else None, "best_so_far": None, "parent": None, "depth": 0} for i in range(300)]
    t["trajectory"] = wide
    page = render_html(report)
    width = int(re.search(r'class="search-tree" width="(\d+)"', page).group(1))
    assert width > 640 * 4  # 300 leaves get room: the page scrolls instead of piling the dots up
    chain = [{"index": i, "hash": f"h{i}", "origin": "llm", "status": "faster", "speedup": 1 + i / 1000,
              "best_so_far": None, "parent": i - 1 if i else None, "depth": i} for i in range(400)]
    t["trajectory"] = chain
    assert 'data-best="1"' in render_html(report)  # no recursion limit, whatever the depth
    t["trajectory"] = [dict(chain[0], parent=1), dict(chain[1], parent=0), dict(chain[2], parent=77)]  # a cycle, a dangling parent
    tree = render_html(report).split('class="search-tree"')[1].split("</svg>")[0]
    assert tree.count("data-status=") == 3


def test_html_escapes_curve_labels_and_origins() -> None:
    report = tree_report()
    t = report["targets"][0]
    t["search"]["curves"] = {"<script>x</script>": [[1, 1.2]]}
    t["trajectory"][0]["origin"] = '"><script>'
    page = render_html(report)
    assert "<script" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_markdown_and_terminal_show_the_search() -> None:
    report = tree_report()
    md = render_markdown(report)
    line = next(line for line in md.splitlines() if "search: strategy" in line)
    assert "greedy" in line and "7 evaluations" in line and "6 LLM calls" in line
    assert "12,345 tokens" in line and "$0.0623" in line and "anthropic:claude\\-test" not in line.split("model")[0]
    assert md.count("search: strategy") == 1  # the skipped target has no search
    console = Console(record=True, width=200)
    render_terminal(report, console)
    text = console.export_text()
    assert "mylib.chain: 2.31x faster" in text and "(greedy, 7 evaluations, 6 LLM calls, $0.0623)" in text
    assert "search: 6 LLM calls, 12,345 tokens, $0.0623 in all" in text
