"""``maxcode show`` on a real store, and the tree helpers it shares with the report."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_maxcode as _run_maxcode
from rich.console import Console

from pytest_maxcode.model.search import NodeRow
from pytest_maxcode.report.tree import (
    best_node,
    best_so_far_curve,
    build_tree,
    curves_by_strategy,
    render_tree,
)
from pytest_maxcode.store import Store, default_path
from pytest_maxcode.store.sqlite import LLMCallRow

SYSTEM = "You write fast CUDA kernels. Reply with one ```cuda block."
REPLY = "Here is a fused kernel:\n```cuda\n__global__ void k() {}\n```"
ROOT = Path(__file__).resolve().parent.parent


def run_maxcode(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Any:
    """The real CLI in a subprocess, importing this checkout's package however it is installed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return _run_maxcode(args, cwd=cwd, env={"PYTHONPATH": path, **(env or {})}, timeout=120)


def _call(store: Store, run_id: int, n: int, cost: float, source: str = "api", reply: str = REPLY) -> int:
    request = {
        "system": SYSTEM,
        "messages": [{"role": "user", "content": f"Improve attempt {n}: the reference is torch.relu(x) * 2"}],
        "max_tokens": 4096, "temperature": 1.0, "thinking_tokens": 0, "sample": n,
    }
    return store.add_llm_call(LLMCallRow(
        run_id=run_id, target_id="mylib.chain", request_key=f"key{n}", provider="anthropic", model="claude-test",
        request=request, response=reply, source=source, input_tokens=1000, output_tokens=200 + n,
        cost_usd=cost, latency_s=2.5,
    ))


def _cand(store: Store, h: str, text: str) -> str:
    store.add_candidate(h, "native", "cuda", text, origin="test")
    return h


def _node(store: Store, **kw: Any) -> int:
    base: dict[str, Any] = {
        "parent_id": None, "strategy": "greedy", "policy": "llm", "step": 0, "depth": 0, "origin": "seed:fused.cu",
        "candidate_hash": None, "status": "not_faster", "reward": 0.97, "speedup": 0.97, "candidate_s": 1e-3,
        "reasons": [], "llm_call_id": None,
    }
    base.update(kw)
    return store.add_node(NodeRow(**base))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three targets; mylib.chain searched by three runs (greedy twice, then sweep)."""
    root = tmp_path_factory.mktemp("showproj")
    with Store(default_path(root)) as store:
        for t in ("mylib.chain", "mylib.other_a", "mylib.other_b"):
            store.upsert_target(t, "function", "mylib.py", "h" + t)
        r1 = store.begin_run("pytest --maxcode", "0.1.0")
        seed = _node(store, run_id=r1, target_id="mylib.chain", origin="seed:fused.cu",
                     candidate_hash=_cand(store, "aaaa1111", "// seed kernel\n__global__ void seed() {}\n"),
                     reasons=["not faster: 0.97x [0.95, 0.99]"])
        c1 = _call(store, r1, 1, 0.0123)
        _node(store, run_id=r1, target_id="mylib.chain", parent_id=seed, step=1, depth=1, origin="anthropic:claude-test",
              candidate_hash=_cand(store, "bbbb2222", "broken("), status="compile_error", reward=-0.75, speedup=None,
              candidate_s=None, reasons=["fused.cu:12: error: expected ';' before '}'", "second reason"], llm_call_id=c1)
        c2 = _call(store, r1, 2, 0.02)
        good = _node(store, run_id=r1, target_id="mylib.chain", parent_id=seed, step=1, depth=1, origin="anthropic:claude-test",
                     candidate_hash=_cand(store, "cccc3333", "// good\n"), status="faster", reward=1.62, speedup=1.62,
                     candidate_s=6e-4, llm_call_id=c2)
        c3 = _call(store, r1, 3, 0.03)
        _node(store, run_id=r1, target_id="mylib.chain", parent_id=good, step=2, depth=2, origin="anthropic:claude-test",
              candidate_hash=_cand(store, "dddd4444", "// BEST KERNEL SOURCE\n__global__ void best() {}\n"),
              status="faster", reward=2.31, speedup=2.31, candidate_s=4e-4, llm_call_id=c3)
        c4 = _call(store, r1, 4, 0.0, source="cache", reply="I cannot help with that.")
        _node(store, run_id=r1, target_id="mylib.chain", parent_id=good, step=2, depth=2, origin="anthropic:claude-test",
              status="format", reward=-1.0, speedup=None, candidate_s=None, reasons=["the reply has no code block"],
              llm_call_id=c4)
        store.finish_run(r1)
        r2 = store.begin_run("pytest --maxcode", "0.1.0")
        _node(store, run_id=r2, target_id="mylib.chain", origin="seed:fused.cu", candidate_hash="aaaa1111",
              status="faster", reward=1.2, speedup=1.2, candidate_s=8e-4)
        _node(store, run_id=r2, target_id="mylib.other_a", candidate_hash="aaaa1111", status="wrong", reward=-0.25,
              speedup=None, reasons=["12% of outputs differ"])
        _node(store, run_id=r2, target_id="mylib.other_b", candidate_hash="aaaa1111", speedup=1.1, status="faster")
        r3 = store.begin_run("pytest --maxcode", "0.1.0")
        _node(store, run_id=r3, target_id="mylib.chain", strategy="sweep", policy="builtin", origin="torch.compile:default",
              candidate_hash="aaaa1111", status="faster", reward=1.5, speedup=1.5, candidate_s=7e-4)
        _node(store, run_id=r3, target_id="mylib.chain", strategy="sweep", policy="builtin", origin="seed:other.cu",
              candidate_hash="bbbb2222", status="timeout", reward=-0.5, speedup=None, candidate_s=None,
              reasons=["timed out after 30 s"])
    (root / "sub" / "dir").mkdir(parents=True)
    return root


def _one_error_line(r: Any) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("maxcode: error: ")
    return lines[0]


def _lines(text: str) -> dict[int, str]:
    """The tree's node lines keyed by node id (a node line's first ``#N`` is its own id)."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"#(\d+)  (root|parent #\d+)  step ", line)
        if m:
            out[int(m.group(1))] = line
    return out


# -- the CLI -------------------------------------------------------------------------------------


def test_tree_of_the_latest_run_with_all_runs(project: Path) -> None:
    r = run_maxcode(["show", "mylib.chain", "--run", "1"], cwd=project / "sub" / "dir", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    lines = _lines(r.stdout)
    assert sorted(lines) == [1, 2, 3, 4, 5]
    assert "root" in lines[1] and "not_faster" in lines[1] and "0.97x" in lines[1] and "seed:fused.cu" in lines[1]
    assert "parent #1" in lines[2] and "compile_error" in lines[2] and "reward -0.75" in lines[2]
    assert "$0.0123" in lines[2] and "expected ';'" in lines[2] and "second reason" not in lines[2]
    assert "parent #1" in lines[3] and "step 1" in lines[3] and "1.62x" in lines[3]
    assert "parent #3" in lines[4] and "step 2" in lines[4] and "2.31x" in lines[4] and "best" in lines[4]
    assert "parent #3" in lines[5] and "format" in lines[5] and "$0 " in lines[5] + " "
    assert "best" not in lines[3].split("anthropic")[-1]
    # children are drawn under their parent: #4 and #5 indented deeper than #3, #3 deeper than #1
    indent = {k: len(v) - len(v.lstrip(" │├└─")) for k, v in lines.items()}
    assert indent[1] < indent[2] == indent[3] < indent[4] == indent[5]
    summary = r.stdout.strip().splitlines()[-1]
    assert "5 node(s)" in summary and "best 2.31x (#4)" in summary
    assert "$0.0623" in summary and "4 LLM call(s)" in summary and "3 to the API" in summary
    assert str(4 * 1000 + 200 * 4 + 1 + 2 + 3 + 4) + " tokens" in summary

    latest = run_maxcode(["show", "mylib.chain"], cwd=project, env={"COLUMNS": "200"})
    assert latest.returncode == 0, latest.stderr
    assert sorted(_lines(latest.stdout)) == [9, 10]  # run 3 only
    assert "strategy sweep" in latest.stdout and "torch.compile:default" in latest.stdout
    assert "0 LLM call(s)" in latest.stdout

    every = run_maxcode(["show", "mylib.chain", "--run", "all"], cwd=project, env={"COLUMNS": "200"})
    assert sorted(_lines(every.stdout)) == [1, 2, 3, 4, 5, 6, 9, 10]
    assert every.stdout.count("mylib.chain: run ") == 3  # one tree per run


def test_target_matching(project: Path) -> None:
    r = run_maxcode(["show", "chain", "--run", "2"], cwd=project, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert sorted(_lines(r.stdout)) == [6]
    r = run_maxcode(["show", "*other_b"], cwd=project, env={"COLUMNS": "200"})
    assert r.returncode == 0 and sorted(_lines(r.stdout)) == [8]
    line = _one_error_line(run_maxcode(["show", "other"], cwd=project))
    assert "matches 2 targets" in line and "mylib.other_a" in line and "mylib.other_b" in line
    line = _one_error_line(run_maxcode(["show", "mylib.*"], cwd=project))
    assert "matches 3 targets" in line
    line = _one_error_line(run_maxcode(["show", "nothing"], cwd=project))
    assert "no target matches 'nothing'" in line and "mylib.chain" in line
    line = _one_error_line(run_maxcode(["show", "chain", "--run", "7"], cwd=project))
    assert "run 7 did not search mylib.chain" in line and "1, 2, 3" in line
    line = _one_error_line(run_maxcode(["show", "chain", "--run", "first"], cwd=project))
    assert "--run" in line


def test_list_targets(project: Path) -> None:
    r = run_maxcode(["show"], cwd=project, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "mylib.chain" in line)
    assert "2.31x" in row and " 3 " in row and " 8 " in row  # 3 runs, 8 nodes
    assert "mylib.other_a" in r.stdout and "mylib.other_b" in r.stdout
    rows = json.loads(run_maxcode(["show", "--json"], cwd=project).stdout)
    assert [x["target"] for x in rows] == ["mylib.chain", "mylib.other_a", "mylib.other_b"]
    assert rows[0]["runs"] == 3 and rows[0]["nodes"] == 8 and rows[0]["best_speedup"] == 2.31
    assert rows[1]["best_speedup"] is None
    assert rows[0]["cost_usd"] == pytest.approx(0.0623)


def test_source(project: Path) -> None:
    r = run_maxcode(["show", "--source", "4"], cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "// BEST KERNEL SOURCE\n__global__ void best() {}\n"
    line = _one_error_line(run_maxcode(["show", "--source", "5"], cwd=project))
    assert "node #5 has no candidate source" in line and "format" in line and "--prompt 5" in line
    line = _one_error_line(run_maxcode(["show", "--source", "99"], cwd=project))
    assert "no node #99" in line
    line = _one_error_line(run_maxcode(["show", "other_a", "--source", "4"], cwd=project))
    assert "node #4 belongs to mylib.chain" in line


def test_prompt(project: Path) -> None:
    r = run_maxcode(["show", "mylib.chain", "--prompt", "3"], cwd=project)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "claude-test" in out and "$0.0200" in out
    assert "=== system ===" in out and SYSTEM in out
    assert "=== user ===" in out and "Improve attempt 2" in out
    assert "=== reply ===" in out and REPLY in out
    assert out.index(SYSTEM) < out.index("Improve attempt 2") < out.index(REPLY)
    r = run_maxcode(["show", "--prompt", "1"], cwd=project)
    assert r.returncode == 0
    assert r.stdout.strip().splitlines() == ["node #1 has no LLM call: it came from the llm policy (origin seed:fused.cu)"]
    call = json.loads(run_maxcode(["show", "--prompt", "5", "--json"], cwd=project).stdout)
    assert call["source"] == "cache" and call["response"] == "I cannot help with that."
    assert call["request"]["system"] == SYSTEM


def test_json_nodes(project: Path) -> None:
    r = run_maxcode(["show", "mylib.chain", "--run", "1", "--json"], cwd=project)
    assert r.returncode == 0, r.stderr
    nodes = json.loads(r.stdout)
    assert [n["id"] for n in nodes] == [1, 2, 3, 4, 5]
    assert [n["parent_id"] for n in nodes] == [None, 1, 1, 3, 3]
    assert nodes[1]["reasons"][0].startswith("fused.cu:12")
    assert nodes[1]["cost_usd"] == pytest.approx(0.0123) and nodes[0]["cost_usd"] == 0.0
    assert nodes[4]["status"] == "format" and nodes[4]["candidate_hash"] is None


def test_missing_store(tmp_path: Path) -> None:
    line = _one_error_line(run_maxcode(["show"], cwd=tmp_path))
    assert "run pytest --maxcode first" in line
    assert not (tmp_path / ".maxcode").exists()  # looking did not create one
    (tmp_path / ".maxcode").mkdir()
    line = _one_error_line(run_maxcode(["show", "x"], cwd=tmp_path))
    assert "maxcode.db" in line and "run pytest --maxcode first" in line
    line = _one_error_line(run_maxcode(["show", "--store", str(tmp_path / "nope.db")], cwd=tmp_path))
    assert "nope.db: no such store; run pytest --maxcode first" in line


def test_explicit_store_and_empty_store(project: Path, tmp_path: Path) -> None:
    r = run_maxcode(["show", "--store", str(default_path(project)), "mylib.other_a", "--run", "2"], cwd=tmp_path,
                    env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "wrong" in _lines(r.stdout)[7] and "12% of outputs differ" in r.stdout
    with Store(default_path(tmp_path)):
        pass
    r = run_maxcode(["show"], cwd=tmp_path)
    assert r.returncode == 0 and "no search trees" in r.stdout


# -- the pure helpers ----------------------------------------------------------------------------


def _n(id: int, status: str, speedup: float | None = None, parent: int | None = None, run: int = 1,
       strategy: str = "greedy", candidate_s: float | None = None) -> dict[str, Any]:
    return {"id": id, "run_id": run, "parent_id": parent, "strategy": strategy, "policy": "llm", "step": 0, "depth": 0,
            "origin": "o", "status": status, "speedup": speedup, "candidate_s": candidate_s, "reward": speedup or -1.0,
            "reasons": [], "llm_call_id": None, "target_id": "t"}


def test_best_so_far_curve() -> None:
    nodes = [
        _n(3, "faster", 1.5),
        _n(1, "compile_error"),
        _n(2, "wrong", 9.0),  # a wrong kernel's speedup never counts
        _n(4, "not_faster", 0.9),
        _n(5, "timeout"),
        _n(6, "faster", 2.0),
        _n(7, "format"),
    ]
    assert best_so_far_curve(nodes) == [[1, None], [2, None], [3, 1.5], [4, 1.5], [5, 1.5], [6, 2.0], [7, 2.0]]
    assert best_so_far_curve([]) == []
    assert best_so_far_curve([_n(1, "not_faster", 0.8)]) == [[1, None]]  # a node that is not faster is never best


def test_curves_by_strategy_labels_runs_only_when_needed() -> None:
    nodes = [
        _n(1, "faster", 1.2, run=1, strategy="greedy"),
        _n(2, "faster", 1.4, run=1, strategy="greedy"),
        _n(3, "wrong", run=2, strategy="beam"),
        _n(4, "faster", 1.1, run=3, strategy="greedy"),
        _n(5, "faster", 3.0, run=2, strategy="beam"),
    ]
    curves = curves_by_strategy(nodes)
    assert list(curves) == ["greedy (run 1)", "beam", "greedy (run 3)"]
    assert curves["greedy (run 1)"] == [[1, 1.2], [2, 1.4]]
    assert curves["beam"] == [[1, None], [2, 3.0]]  # each run's curve starts at evaluation 1
    assert curves["greedy (run 3)"] == [[1, 1.1]]
    assert curves_by_strategy([_n(1, "faster", 1.2)]) == {"greedy": [[1, 1.2]]}
    assert curves_by_strategy([]) == {}


def test_build_tree_and_best_node() -> None:
    nodes = [_n(1, "not_faster", 0.9), _n(2, "faster", 1.5, parent=1, candidate_s=2.0),
             _n(3, "faster", 1.4, parent=1, candidate_s=1.0), _n(4, "wrong", parent=3), _n(5, "faster", 1.1, parent=99)]
    roots = build_tree(nodes)
    assert [r["id"] for r in roots] == [1, 5]  # a parent outside the list makes a root
    assert [c["id"] for c in roots[0]["children"]] == [2, 3]
    assert [c["id"] for c in roots[0]["children"][1]["children"]] == [4]
    assert "children" not in nodes[0]  # the input is not modified
    best = best_node(nodes)
    assert best is not None and best["id"] == 3  # faster, and the lowest own time wins over the higher speedup
    assert best_node([_n(1, "wrong"), _n(2, "crash")]) is None


def test_render_tree_deep_chain_and_markup() -> None:
    nodes = [_n(1, "faster", 1.1)] + [_n(i, "faster", 1.0 + i / 100, parent=i - 1) for i in range(2, 400)]
    nodes[0]["origin"] = "[bold]evil[/bold]"
    console = Console(record=True, width=100000)
    render_tree(nodes, console, {})
    text = console.export_text()
    assert "[bold]evil[/bold]" in text
    assert "#399" in text
