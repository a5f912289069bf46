"""``maxcode ablate``: real pytest --maxcode runs per setting and seed, recorded against a
scripted server once, then the table rebuilt offline from the cassettes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fakes import FAKE_KEY, FakeLLMServer
from test_plugin_llm import make_project
from test_search_llm import scripted_model

from pytest_maxcode.bench.ablation import (
    RunResult,
    Setting,
    curve_of,
    markdown_table,
    summarize,
)
from pytest_maxcode.llm.cassette import read_cassette

SETTINGS = "feedback,trajectory+critique+best"


def ablate(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    full.update(env or {})
    cmd = [sys.executable, "-m", "pytest_maxcode.cli", "ablate", *args]
    return subprocess.run(cmd, cwd=path, capture_output=True, text=True, env=full, timeout=900)


def test_the_ablation_table_is_recorded_once_and_rebuilt_from_the_cassettes(tmp_path: Path) -> None:
    path = tmp_path / "proj"
    path.mkdir()
    make_project(path)
    with FakeLLMServer("anthropic") as srv:
        srv.respond_with(scripted_model())
        recorded = ablate(path, f"--observations={SETTINGS}", "--seeds=2", "--budget=2", f"--llm={srv.spec('claude-test')}",
                          "--record=cassettes", "--out=first", "--json", env={"ANTHROPIC_API_KEY": FAKE_KEY})
        asked = list(srv.requests)
    assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
    first = json.loads(recorded.stdout)
    # one cassette per (setting, seed); the seeds asked for different samples
    cassettes = sorted(p.name for p in (path / "cassettes").iterdir())
    assert cassettes == ["feedback__none__s0.jsonl", "feedback__none__s1.jsonl",
                         "trajectory-critique-best__none__s0.jsonl", "trajectory-critique-best__none__s1.jsonl"]
    samples = {c: {e["request"]["sample"] for e in read_cassette(path / "cassettes" / c).entries} for c in cassettes}
    assert max(samples["feedback__none__s0.jsonl"]) < 10_000 <= min(samples["feedback__none__s1.jsonl"])
    # settings that send the same prompt share the store's response cache; each cassette
    # still holds every reply its run saw, so each replays alone
    unique = {e["key"] for c in cassettes for e in read_cassette(path / "cassettes" / c).entries}
    assert len(asked) == len(unique) < sum(len(read_cassette(path / "cassettes" / c).entries) for c in cassettes)
    # offline: the server is gone, no key is set, the cache is cleared
    shutil.rmtree(path / ".maxcode")
    replayed = ablate(path, f"--observations={SETTINGS}", "--seeds=2", "--budget=2", "--llm=replay:cassettes", "--out=second")
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    table = (path / "second" / "table.md").read_text()
    assert table == replayed.stdout.split("table, plot")[0]
    lines = table.splitlines()
    assert lines[0].startswith("| observation | rerank | seeds | best speedup (mean ± sd) | at 1 evals |")
    assert [ln.split("|")[1].strip() for ln in lines[2:]] == ["feedback", "trajectory+critique+best"]
    assert all("| 2/2 |" in ln for ln in lines[2:])
    second = json.loads((path / "second" / "ablation.json").read_text())
    # the same replies lead to the same searches: every run's statuses match the recording's
    for a, b in zip(first["runs"], second["runs"]):
        ra, rb = json.loads(Path(a["report"]).read_text()), json.loads(Path(b["report"]).read_text())
        assert [s["status"] for s in ra["targets"][0]["trajectory"]] == [s["status"] for s in rb["targets"][0]["trajectory"]]
        assert len(b["curve"]) == 2 and b["error"] is None
    svg = (path / "second" / "curves.svg").read_text()
    assert svg.count("data-curve=") == 2 and "feedback | rerank none" in svg


def test_a_run_without_targets_is_a_visible_failure(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    assert 1 + 1 == 2\n")
    r = ablate(tmp_path, "--observations=feedback", "--seeds=1", "--budget=2", "--llm=none", "--out=out")
    assert r.returncode == 1
    assert "failed: no target was searched" in r.stdout


def _run(setting: Setting, seed: int, curve: list[float], faster: int = 1) -> RunResult:
    return RunResult(setting, seed, 0, None, curve=curve, targets=1, faster=faster, evaluations=len(curve), llm_calls=2 * len(curve))


def test_curves_count_only_verified_speedups_and_combine_targets_by_geomean() -> None:
    report = {"targets": [
        {"status": "verified", "search": {"llm_calls": 3}, "trajectory": [
            {"status": "wrong", "speedup": None}, {"status": "not_faster", "speedup": 1.04}, {"status": "faster", "speedup": 4.0}]},
        {"status": "failed", "search": {"llm_calls": 1}, "trajectory": [{"status": "faster", "speedup": 1.0 / 0.25 / 4}]},
        {"status": "skipped", "trajectory": []},
    ]}
    curve, totals = curve_of(report, 4)
    # target 1: 1, 1, 4, 4; target 2: 1 (a 1.0x "faster" is no gain) held to the budget
    assert curve == pytest.approx([1.0, 1.0, 2.0, 2.0])
    assert totals["targets"] == 2 and totals["llm_calls"] == 4 and totals["evaluations"] == 4
    assert totals["faster"] == 1  # the verified one; the failed one's 1.0x is no faster target


def test_summary_rows_average_seeds_and_the_table_shows_spread() -> None:
    a, b = Setting("feedback", "none"), Setting("best", "light")
    rows = summarize([_run(a, 0, [1.0, 2.0]), _run(a, 1, [1.0, 4.0]), _run(b, 0, [1.5, 1.5], faster=0)], 2)
    assert rows[0]["best_speedup"] == 3.0 and rows[0]["best_speedup_sd"] == pytest.approx(2 ** 0.5)
    assert rows[0]["curve"] == [[1, 1.0], [2, 3.0]] and rows[1]["faster_targets"] == 0
    table = markdown_table(rows, 2)
    assert "| feedback | none | 2/2 | 3.000 ± 1.414 | 1.000 | 100% |" in table
    assert "| best | light | 1/1 | 1.500 ± 0.000 |" in table
