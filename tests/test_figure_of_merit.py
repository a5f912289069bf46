"""One figure of merit: the verdict's confirmed speedup and interval are what ``maxcode show``,
the curves, the reports and the pull request quote, and only a ``faster`` node is ever best.

The run this reproduces: a ``not_faster`` node measured 8.92x inside [0.54, 11.4] (no speedup
at all), a ``faster`` one 5.65x [5.10, 6.20] once confirmed; everything must say 5.65x.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pytest_maxcode import verify
from pytest_maxcode.bot import pr_body
from pytest_maxcode.model.search import NodeRow
from pytest_maxcode.oracle import stats
from pytest_maxcode.oracle.check import (
    CandidateSpec,
    confirmed,
    decide,
    second_measurement,
)
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.report import render_html, render_markdown
from pytest_maxcode.report.tree import (
    best_node,
    best_so_far_curve,
    curves_by_strategy,
    node_line,
    render_tree,
)
from pytest_maxcode.search.state import Proposal, SearchState
from pytest_maxcode.store import Store
from pytest_maxcode.store.sqlite import default_path

NOISY = dict(point=8.92, low=0.54, high=11.4)  # no speedup: the interval spans a factor of 21
SCREENED = dict(point=7.9, low=6.8, high=9.1)  # the first measurement of the faster candidate
CONFIRMED = dict(point=5.65, low=5.10, high=6.20)  # its second one, in a fresh worker: the verdict


def _timed(name: str, point: float, low: float, high: float, candidate_s: float) -> Verdict:
    v = Verdict(name, "runtime_error", hash=name * 8, format="native", lang="cpp")
    decide(v, stats.Speedup(point, low, high), 1.05, device="cpu", timer="time")
    v.reference_s, v.candidate_s = candidate_s * point, candidate_s
    return v


def verdicts() -> tuple[Verdict, Verdict]:
    """The noisy not_faster verdict, and the faster one as the oracle confirms it."""
    noisy = _timed("noisy", **NOISY, candidate_s=0.4e-3)  # the lowest own time of the two, too
    first = _timed("fast", **SCREENED, candidate_s=0.5e-3)
    again = second_measurement(first)
    decide(again, stats.Speedup(**CONFIRMED), 1.05, device="cpu", timer="time")
    again.reference_s, again.candidate_s = 0.6e-3 * CONFIRMED["point"], 0.6e-3
    return noisy, confirmed(first, again, "in a fresh worker")


def test_the_verdict_is_the_confirmed_measurement() -> None:
    noisy, fast = verdicts()
    assert noisy.status == "not_faster" and noisy.diagnostics["undecided"] and "too noisy to decide" in noisy.reasons[0]
    assert fast.status == "faster" and (fast.speedup, fast.speedup_ci) == (5.65, [5.1, 6.2])
    assert fast.diagnostics["screening"]["speedup"] == 7.9  # the first run only selected it


@pytest.fixture
def stored(tmp_path: Path) -> list[dict[str, Any]]:
    """The two verdicts as the search loop stores them: nodes of one run."""
    noisy, fast = verdicts()
    with Store(default_path(tmp_path)) as store:
        run = store.begin_run("pytest --maxcode", "0")
        for v in (noisy, fast):
            store.add_candidate(v.hash, "native", "cpp", f"// {v.candidate}\n", origin=v.candidate)
            store.add_node(NodeRow(run_id=run, target_id="lib.f", parent_id=None, strategy="sweep", policy="builtin", step=0,
                           depth=0, origin=v.candidate, candidate_hash=v.hash, status=v.status, reward=v.speedup or 0.0,
                           speedup=v.speedup, candidate_s=v.candidate_s, reasons=v.reasons, llm_call_id=None))
        return store.nodes("lib.f")


def test_show_and_the_curves_pick_the_faster_node_and_quote_its_confirmed_speedup(stored: list[dict[str, Any]]) -> None:
    noisy_node, fast_node = stored
    best = best_node(stored)
    assert best is not None and best["id"] == fast_node["id"] and best["speedup"] == 5.65
    assert best_so_far_curve(stored) == [[1, None], [2, 5.65]]  # the not_faster 8.92x never counts
    assert curves_by_strategy(stored) == {"sweep": [[1, None], [2, 5.65]]}
    assert best_node([noisy_node]) is None  # merely correct is never best
    console = Console(record=True, width=400)
    render_tree(stored, console, {})
    lines = console.export_text().splitlines()
    marked = [line for line in lines if "<- best" in line]
    assert len(marked) == 1 and "faster  5.65x" in marked[0] and "8.92x" not in marked[0]
    # where a node carries its interval, show quotes it next to the number
    line = node_line(dict(fast_node, speedup_ci=[5.1, 6.2]), {}, best=True)
    assert "5.65x [5.10, 6.20]" in line.plain


def test_the_search_state_the_report_and_the_pr_quote_the_same_number(tmp_path: Path) -> None:
    noisy, fast = verdicts()
    state = SearchState("lib.f")
    for v in (noisy, fast):
        path = tmp_path / f"{v.candidate}.cpp"
        path.write_text(f"// {v.candidate}\n")
        state.add(Proposal(CandidateSpec.from_path(path), origin=f"seed:{v.candidate}"), v, step=0)
    assert state.best is not None and state.best.verdict is fast  # the lower own time did not win: not faster
    trajectory = [
        {"index": n.index, "hash": n.verdict.hash, "origin": n.proposal.origin, "status": n.verdict.status,
         "speedup": n.verdict.speedup, "candidate_s": n.verdict.candidate_s, "best_so_far": None, "parent": None, "depth": 0}
        for n in state.trajectory
    ]
    target = {
        "id": "lib.f", "kind": "function", "status": "verified", "reason": fast.reasons[0], "speedup": fast.speedup,
        "speedup_ci": fast.speedup_ci, "verified": True, "weak_check": False, "baseline_s": fast.reference_s,
        "best_s": fast.candidate_s, "workloads": [], "device": "cpu", "arch": "x86_64",
        "candidates": {"tried": 2, "correct": 2, "faster": 1, "failed": {}},
        "best": {"source_path": "k.cpp", "hash": fast.hash, "lang": "cpp", "origin": "seed:fast", "params": {}},
        "tests": {"rerun": ["tests/test_f.py::test_f"], "passed": True, "summary": "1 passed"}, "benchmarks": [],
        "trajectory": trajectory, "elapsed_s": 1.0, "reference": {"file": "lib.py"},
        "search": {"strategy": "sweep", "policy": "builtin", "llm": None, "observation": None, "stop_reason": "done",
                   "llm_calls": 0, "tokens": 0, "cost_usd": 0.0, "evaluations": 2,
                   "curves": {"sweep": best_so_far_curve(trajectory)}},
    }
    report = {"schema_version": 1, "tool_version": "0", "created_at": "now",
              "machine": {"host": "h", "cpu": "c", "cores": "2", "torch": "2", "device": "cpu"},
              "options": {"budget": 2, "time": None, "policy": "builtin", "min_speedup": 1.05, "device": "cpu", "apply": False},
              "targets": [target]}
    md = render_markdown(report)
    assert "5.65x [5.10, 6.20]" in md and "8.92" not in md.split("## lib.f")[0]
    html = render_html(report)
    assert "best 5.65x" in html and "best 8.92x" not in html
    assert "sweep: best 5.65x at evaluation 2 of 2" in html
    # the trajectory's step line never rises to the not_faster point estimate
    assert 'data-best="1"' in html and re.search(r"#1 faster, speedup 5\.65x[^<]*\(best\)", html)
    body = pr_body.body(target, report, source="// k\n", kernel_path="maxcode_kernels/lib.f.cpp", kernel_hash="ab" * 8,
                        branch="maxcode/optimize-lib.f")
    assert "is 5.65x faster" in body and "**5.65x** [5.1, 6.2]" in body and "8.92" not in body
    assert pr_body.title(target, report["machine"]) == "⚡ Speed up lib.f 5.65x (C++, CPU)"


def test_a_noisy_run_says_so_in_one_line() -> None:
    noisy, _ = verdicts()
    target = {"id": "lib.g", "status": "no_speedup", "reason": noisy.reasons[0], "speedup": noisy.speedup,
              "speedup_ci": noisy.speedup_ci, "trajectory": [], "candidates": {"tried": 1, "correct": 1, "faster": 0, "failed": {}}}
    report = {"options": {"min_speedup": 1.05}, "targets": [target]}
    md = render_markdown(report)
    (line,) = [ln for ln in md.splitlines() if ln.startswith("**too noisy to decide")]
    assert "lib.g 8.92x [0.54, 11.40]" in line
    console = Console(record=True, width=80)
    from pytest_maxcode.report import render_terminal

    render_terminal(report, console)
    text = console.export_text()
    assert text.count("too noisy to decide: 1 target(s)") == 1
    quiet = dict(target, speedup=0.98, speedup_ci=[0.95, 1.01], reason="not faster")  # decided
    assert "too noisy" not in render_markdown(dict(report, targets=[quiet]))


def test_benchmark_reruns_quote_an_interval_not_a_ratio_of_two_runs() -> None:
    def run(*rounds: list[float]) -> verify.TestRun:
        name = "tests/test_b.py::test_bench"
        return verify.TestRun(True, "1 passed", 1, {name: {"median_s": 0.0, "mean_s": 0.0, "stddev_s": 0.0, "rounds": 0}}, {name: list(rounds[0])})

    steady = [1.0e-3 + i * 1e-7 for i in range(50)]
    fast = [0.5e-3 + i * 1e-7 for i in range(50)]
    fluke = [0.5e-3 / 19 + i * 1e-9 for i in range(50)]  # one candidate run 19x faster than the others: noise
    (calm,) = verify.benchmark_speedups([run(steady)] * 3, [run(fast)] * 3)
    assert calm["runs"] == 3 and calm["reference"]["rounds"] == 150
    assert 1.9 < calm["speedup_ci"][0] <= calm["speedup"] <= calm["speedup_ci"][1] < 2.1
    (noisy,) = verify.benchmark_speedups([run(steady)] * 3, [run(fast), run(fluke), run(fast)])
    lo, hi = noisy["speedup_ci"]
    assert lo < 2.1 and hi > 30  # the fluke widens the interval instead of becoming the number
    assert noisy["speedup"] < 4


def test_an_undecided_verdict_earns_no_speedup_it_did_not_show() -> None:
    from pytest_maxcode.search.reward import reward

    noisy, fast = verdicts()
    assert reward(noisy) == 1.0 and reward(fast) == 5.65


def test_a_benchmark_rerun_keeps_every_round(tmp_path: Path) -> None:
    (tmp_path / "test_b.py").write_text("def test_bench(benchmark):\n    benchmark(sum, range(1000))\n")
    run = verify.run_tests(tmp_path, ["test_b.py::test_bench"], {}, "x", benchmark=True)
    assert run.passed, run.summary
    (name,) = run.rounds
    assert len(run.rounds[name]) == run.benchmarks[name]["rounds"] >= 20  # every round, not only the median
