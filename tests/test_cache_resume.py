"""The action's ``.maxcode`` cache across two runners: a scheduled run in one checkout, then the
next run in a fresh clone at another absolute path with ``.maxcode`` restored the way
``actions/cache`` restores it (exactly the paths action.yml lists). The second run must resume:
no new model request, no decided evaluation measured again, no candidate compiled again
(issue 15, deliverable 5).

Real git, the real ``pytest --maxcode`` in subprocesses, the real OpenAI SDK against a
scripted server on 127.0.0.1. The candidates are a wrong kernel and a correct one 4x slower
than the reference: both verdicts are decided on a loaded machine, and neither needs the
five timed blocks a speedup does, so the two runs stay short."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llm_fakes
import pytest
import yaml
from llm_fakes import FakeLLMServer, code_reply
from test_plugin_llm import LIB, TESTS
from test_search_llm import SLOW, WRONG

ACTION = Path(__file__).resolve().parents[1] / "action.yml"

# two candidates from two model calls: the search ends once both are evaluated
PYPROJECT = '''
[tool.maxcode]
budget = 2
k = 2
llm_calls = 2
llm_concurrency = 1
torch_compile = false

[tool.pytest.ini_options]
pythonpath = ["."]
'''


def cached_paths(working_directory: str = ".") -> list[str]:
    """The ``path:`` lines of the action's ``.maxcode`` restore and save steps, with the project's
    folder filled in: what a fresh runner gets back is exactly what these list."""
    steps = yaml.safe_load(ACTION.read_text())["runs"]["steps"]
    lists = [
        [p.strip().replace("${{ inputs.working-directory }}", working_directory) for p in s["with"]["path"].splitlines() if p.strip()]
        for s in steps
        if s.get("uses", "").startswith("actions/cache/") and "maxcode-store-" in s["with"]["key"]
    ]
    assert len(lists) == 2 and lists[0] == lists[1], "the restore and save steps must list the same paths"
    assert lists[0] and not any("${{" in p for p in lists[0]), lists[0]
    return lists[0]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def run_maxcode(checkout: Path, llm: str, machine_cache: Path) -> subprocess.CompletedProcess:
    """The action's ``pytest --maxcode`` step. ``machine_cache`` is the runner's own cache of
    machine probes (``$MAXCODE_CACHE_DIR``, outside ``.maxcode``: the action does not keep it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update({"OPENAI_API_KEY": llm_fakes.FAKE_KEY, "MAXCODE_CACHE_DIR": str(machine_cache)})
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", f"--maxcode-llm={llm}",
           "--maxcode-json=report.json"]
    return subprocess.run(cmd, check=False, cwd=checkout, capture_output=True, text=True, env=env, timeout=300)


def built_libraries(checkout: Path) -> dict[str, float]:
    """Every compiled library under the build cache, with its modification time."""
    return {str(p.relative_to(checkout)): p.stat().st_mtime for p in (checkout / ".maxcode" / "build").rglob("*.so")}


def llm_calls(checkout: Path) -> list[tuple[str, float]]:
    db = sqlite3.connect(checkout / ".maxcode" / "maxcode.db")
    try:
        return list(db.execute("SELECT source, cost_usd FROM llm_calls ORDER BY id"))
    finally:
        db.close()


def the_target(checkout: Path) -> dict[str, Any]:
    [t] = json.loads((checkout / "report.json").read_text())["targets"]
    return t


@dataclass
class FirstRun:
    """This week's scheduled run, on runner A; its ``.maxcode`` is what the cache saves."""

    origin: Path
    checkout: Path
    machine_cache: Path
    server: FakeLLMServer
    llm: str
    requests: int
    target: dict[str, Any]
    libraries: dict[str, float]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstRun]:
    root = tmp_path_factory.mktemp("cache_resume")
    origin = root / "origin"
    origin.mkdir()
    (origin / "mylib.py").write_text(LIB)
    (origin / "test_lib.py").write_text(TESTS)
    (origin / "pyproject.toml").write_text(PYPROJECT)
    (origin / ".gitignore").write_text(".maxcode/\nreport.json\n__pycache__/\n")
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "project")
    a = root / "runner-a" / "work" / "proj"
    git(root, "clone", "-q", str(origin), str(a))
    # the two replies the first run pays for; a further request gets a 400 (and is counted)
    with FakeLLMServer("openai") as srv:
        srv.script(code_reply(WRONG), code_reply(SLOW))
        llm = srv.spec("local-model")
        result = run_maxcode(a, llm, root / "runner-a" / "machine")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        t = the_target(a)
        assert len(srv.requests) == t["search"]["llm_calls"] == 2, t["search"]
        assert [(e["status"], e["resumed"]) for e in t["trajectory"]] == [("wrong", False), ("not_faster", False)], t["trajectory"]
        libraries = built_libraries(a)
        assert len(libraries) >= 2, libraries  # both candidates compiled
        yield FirstRun(origin, a, root / "runner-a" / "machine", srv, llm, len(srv.requests), t, libraries)


def restore_and_rerun(first: FirstRun, runner: Path, machine_cache: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """Next week's run on a fresh runner: a new clone at another absolute path, ``.maxcode``
    restored from the cache (only the paths action.yml lists), the same command."""
    b = runner / "elsewhere" / "checkout"
    git(runner.parent, "clone", "-q", str(first.origin), str(b))
    assert not (b / ".maxcode").exists() and b.resolve() != first.checkout.resolve()
    for rel in cached_paths("."):
        src = first.checkout / rel
        assert src.is_dir(), rel
        shutil.copytree(src, b / rel, symlinks=True)  # tar keeps modification times, as copytree does
    return b, run_maxcode(b, first.llm, machine_cache)


def assert_resumed(first: FirstRun, b: Path, result: subprocess.CompletedProcess) -> None:
    # no paid call: the server was not asked again
    new = first.server.requests[first.requests:]
    if new:
        old, now = ("\n".join(m["content"] for m in r["messages"]).splitlines() for r in (first.server.requests[0], new[0]))
        diff = difflib.unified_diff(old, now, lineterm="", n=0)
        pytest.fail(f"{len(new)} new model request(s); the first differs from run A's by:\n" + "\n".join(diff))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    calls = llm_calls(b)
    assert [c for c, _ in calls[first.requests:]] == ["cache"] * first.requests, calls
    assert all(cost == 0 for _, cost in calls[first.requests:])
    t = the_target(b)
    assert t["search"]["llm_calls"] == 0, t["search"]
    # the same candidates; every decided verdict taken from the store (one run A could not
    # decide is timed again by design, statistics.md "Undecided")
    before = first.target["trajectory"]
    assert [(e["hash"], e["status"]) for e in t["trajectory"]] == [(e["hash"], e["status"]) for e in before]
    assert [e["resumed"] for e in t["trajectory"]] == [not e["undecided"] for e in before], t["trajectory"]
    assert t["trajectory"][0]["resumed"]  # a wrong verdict is never undecided
    # no candidate compiled again: the build cache holds the same libraries, untouched
    assert built_libraries(b) == first.libraries


def test_a_restored_store_resumes_in_a_fresh_clone_at_another_path(first_run: FirstRun, tmp_path: Path) -> None:
    """Runner B's probe of the machine agrees with runner A's (a runner that keeps its
    ``~/.cache``, as a self-hosted one does): nothing in ``.maxcode`` depends on the path."""
    machine = tmp_path / "machine"
    shutil.copytree(first_run.machine_cache, machine)
    b, result = restore_and_rerun(first_run, tmp_path / "runner-b", machine)
    assert_resumed(first_run, b, result)


def test_a_restored_store_resumes_on_a_runner_that_probes_its_own_machine(first_run: FirstRun, tmp_path: Path) -> None:
    """Runner B is an ephemeral runner: it probes the machine itself, and measures a copy
    bandwidth 3% below runner A's (less than this machine's run-to-run noise). The prompts
    still quote the description A's were written with (kept in ``.maxcode/devices.json`` for
    this kind of machine), so they match the stored ones and the response cache answers."""
    machine = tmp_path / "machine"
    shutil.copytree(first_run.machine_cache, machine)
    probes = [p for p in machine.rglob("*.json") if "bytes_per_s" in json.loads(p.read_text())]
    assert probes
    for p in probes:
        probe = json.loads(p.read_text())
        probe["bytes_per_s"] *= 0.97
        p.write_text(json.dumps(probe))
    b, result = restore_and_rerun(first_run, tmp_path / "runner-b", machine)
    assert_resumed(first_run, b, result)
