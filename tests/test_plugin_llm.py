"""``pytest --maxcode`` with a model: a scripted Anthropic server on 127.0.0.1, the real SDK,
a cassette recorded and replayed offline, and the ``pytest_maxcode_*`` hooks from a conftest."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fakes import FAKE_KEY, FakeLLMServer
from test_search_llm import GOOD, WRONG, scripted_model

from pytest_maxcode.llm.cassette import read_cassette
from pytest_maxcode.report import validate

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def fused(x, bias):
    """relu(2x + b)^2 - 0.5 one row at a time: slow on purpose, so the fused kernel wins by far more
    than a loaded machine's noise and a replayed search reaches the same verdicts."""
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        y = torch.relu(x[r] * 2.0 + bias)
        out[r] = y * y - 0.5
    return out
'''

TESTS = '''
import torch

from mylib import fused


def test_fused():
    x, b = torch.randn(256, 1024), torch.randn(1024)
    torch.testing.assert_close(fused(x, b), torch.clamp(2 * x + b, min=0) ** 2 - 0.5)
'''

PYPROJECT = '''
[tool.maxcode]
budget = 6
k = 2
llm_concurrency = 1
torch_compile = false

[tool.maxcode.prices]
scripted-claude-test = { input = 3.0, output = 15.0 }

[tool.pytest.ini_options]
pythonpath = ["."]
'''

CONFTEST = '''
import json


def pytest_maxcode_evaluation(target, node):
    with open("evaluations.jsonl", "a") as f:
        f.write(json.dumps({"target": target.id, "index": node.index, "status": node.verdict.status,
                            "parent": node.parent.index if node.parent else None, "reward": node.reward}) + "\\n")
'''

HOOKS = CONFTEST + '''

from pytest_maxcode.search.policy import candidates_dir, materialize
from pytest_maxcode.search.state import Proposal
from pytest_maxcode.search.strategy import Ask


class OneRound:
    """A strategy from a plugin: one batch of two, then stop."""

    name = "one-round"

    def initialize(self, state, proposer, params):
        self.state, self.proposer, self.done = state, proposer, False

    def propose(self, n):
        self.done = True
        return self.proposer.propose(self.state, [Ask()] * min(n, 2))

    def update(self, nodes):
        pass

    def best(self):
        return self.state.best

    def should_stop(self):
        return "one round is enough" if self.done else None


class Handwritten:
    """A policy from a plugin: always the same (wrong) kernel."""

    name = "handwritten"

    def __init__(self, target):
        self.target = target

    def propose(self, state, asks):
        spec = materialize(candidates_dir(__import__("pathlib").Path("."), self.target.id), WRONG, "cpp", "hand")
        return [Proposal(spec, "handwritten", parent=a.parent, mode=a.mode) for a in asks]


def pytest_maxcode_strategy(name, settings):
    if name == "one-round":
        return OneRound()


def pytest_maxcode_policy(name, target, settings):
    if name == "handwritten":
        return Handwritten(target)


def pytest_maxcode_propose(target, state, asks):
    if not state.trajectory:
        return [GOOD]
'''


def make_project(path: Path, conftest: str = CONFTEST) -> None:
    (path / "mylib.py").write_text(LIB)
    (path / "test_lib.py").write_text(TESTS)
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "conftest.py").write_text(f"GOOD = {GOOD!r}\nWRONG = {WRONG!r}\n" + conftest)


def run(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    full.update(env or {})
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", *args]
    return subprocess.run(cmd, cwd=path, capture_output=True, text=True, env=full, timeout=900)


def nodes(path: Path) -> list[dict]:
    db = sqlite3.connect(path / ".maxcode" / "maxcode.db")
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM nodes ORDER BY id")]


def evaluations(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "evaluations.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess, list[dict]]:
    """A search against the scripted server, recorded to a cassette; then the server is gone."""
    path = tmp_path_factory.mktemp("llm_project")
    make_project(path)
    with FakeLLMServer("anthropic") as srv:
        srv.respond_with(scripted_model())
        result = run(path, f"--maxcode-llm={srv.spec('claude-test')}", "--maxcode-record=cassette.jsonl",
                     "--maxcode-json=out/report.json", env={"ANTHROPIC_API_KEY": FAKE_KEY})
        requests = list(srv.requests)
    return path, result, requests


def test_a_model_driven_search_is_verified_and_reported(recorded: tuple[Path, subprocess.CompletedProcess, list[dict]]) -> None:
    path, result, requests = recorded
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads((path / "out" / "report.json").read_text())
    validate(report)
    t = report["targets"][0]
    assert t["status"] == "verified", t["reason"]
    assert t["best"]["origin"] == "anthropic:scripted-claude-test"  # labelled as scripted
    search = t["search"]
    assert search["strategy"] == "maxcode" and search["policy"] == "llm" and search["llm"] == "anthropic:claude-test (scripted replies)"
    assert search["observation"] == "trajectory+best" and search["evaluations"] == len(t["trajectory"]) <= 6
    rows = nodes(path)
    # the store keeps every sample; the report lists each source once
    assert len({r["candidate_hash"] or r["id"] for r in rows}) == len(t["trajectory"]) <= len(rows)
    assert {r["status"] for r in rows} >= {"format", "faster"}
    # costs add up: the report's total is the calls' sum, each priced from its tokens
    db = sqlite3.connect(path / ".maxcode" / "maxcode.db")
    calls = db.execute("SELECT input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_usd, scripted FROM llm_calls").fetchall()
    assert len(calls) == len(requests) == search["llm_calls"]
    for i, o, cw, cr, cost, scripted in calls:
        assert cost == pytest.approx((3.0 * i + 15.0 * o + 3.0 * cw + 0.3 * cr) / 1e6) and scripted == 1
    assert search["cost_usd"] == pytest.approx(sum(c[4] for c in calls), abs=1e-6) and search["cost_usd"] > 0
    # the prompt: the static prefix is marked for caching, the reference and the ABI are in it
    first = requests[0]
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "maxcode_run" in first["system"][0]["text"] and "def fused(x, bias)" in first["system"][0]["text"]
    assert "float32[256,1024]@cpu" in first["system"][0]["text"]
    # the evaluation hook saw every node (a source once: its repeats are rows, not nodes), parents included
    seen = evaluations(path)
    firsts = list({(r["candidate_hash"] or r["id"]): r for r in reversed(rows)}.values())[::-1]
    assert [e["status"] for e in seen] == [r["status"] for r in sorted(firsts, key=lambda r: r["id"])]
    assert any(e["parent"] is not None for e in seen)
    # the key never reaches output or files
    assert FAKE_KEY not in result.stdout + result.stderr
    for f in [*(path / ".maxcode").rglob("*"), path / "cassette.jsonl", path / "out" / "report.json"]:
        if f.is_file() and f.suffix in (".json", ".jsonl", ".md", ".html", ".db"):
            assert FAKE_KEY.encode() not in f.read_bytes(), f


def test_the_cassette_replays_the_same_search_offline(recorded: tuple[Path, subprocess.CompletedProcess, list[dict]], tmp_path: Path) -> None:
    path, first, _ = recorded
    cassette = read_cassette(path / "cassette.jsonl")
    assert cassette.header["model"] == "claude-test" and cassette.header["scripted"] is True and cassette.header["recorded_at"]
    before = [(r["status"], r["candidate_hash"], r["parent_id"] is None) for r in nodes(path)]
    fresh = tmp_path / "replay"
    fresh.mkdir()
    make_project(fresh)
    (fresh / "cassette.jsonl").write_bytes((path / "cassette.jsonl").read_bytes())
    result = run(fresh, "--maxcode-llm=replay:cassette.jsonl")  # no server, no key, a new store
    assert result.returncode == 0, result.stdout[-3000:]
    after = [(r["status"], r["candidate_hash"], r["parent_id"] is None) for r in nodes(fresh)]
    replayed = json.loads((fresh / ".maxcode" / "reports" / "report.json").read_text())["targets"][0]
    assert after == before, replayed["search"]["stop_reason"]
    db = sqlite3.connect(fresh / ".maxcode" / "maxcode.db")
    assert {s for (s,) in db.execute("SELECT source FROM llm_calls")} == {"replay"}


def test_plugins_add_a_strategy_a_policy_and_proposals(tmp_path: Path) -> None:
    make_project(tmp_path, HOOKS)
    result = run(tmp_path, "--maxcode-strategy=one-round", "--maxcode-policy=handwritten", "--maxcode-json=out/report.json")
    assert result.returncode == 0, result.stdout[-3000:]
    t = json.loads((tmp_path / "out" / "report.json").read_text())["targets"][0]
    assert t["search"]["strategy"] == "one-round" and t["search"]["policy"] == "handwritten"
    assert t["search"]["stop_reason"] == "one round is enough"
    assert [(x["origin"], x["status"]) for x in t["trajectory"]] == [("plugin", "faster"), ("handwritten", "wrong")]
    assert t["status"] == "verified" and [e["status"] for e in evaluations(tmp_path)] == ["faster", "wrong"]


def test_a_missing_api_key_is_one_clear_line(tmp_path: Path) -> None:
    make_project(tmp_path)
    result = run(tmp_path, "--maxcode-llm=anthropic:claude-test")
    assert result.returncode == 4
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "ANTHROPIC_API_KEY" in ln]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "--maxcode-llm" in lines[0]


def test_an_unknown_strategy_is_one_clear_line(tmp_path: Path) -> None:
    make_project(tmp_path)
    result = run(tmp_path, "--maxcode-strategy=greedy")
    assert result.returncode == 4 and "Traceback" not in result.stdout + result.stderr
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "greedy" in ln]
    assert len(lines) == 1 and "best-of-n" in lines[0] and "pytest_maxcode_strategy" in lines[0]
