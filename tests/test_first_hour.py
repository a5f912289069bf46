"""A new user's first hour: bad settings, exit statuses, a damaged store, MAXCODE_DISABLE in
``maxcode status``, 80-column tables. Each case is a pytester project run in a subprocess."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.model.search import NodeRow
from pytest_maxcode.store import Store, default_path

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def double(x):
    return x * 2.0


@maxcode.optimize(lang="cpp")
def shift(x):
    return x + 1.0
'''

TESTS = '''
import torch

from mylib import double, shift


def test_double():
    x = torch.randn(64, 64)
    torch.testing.assert_close(double(x), x * 2.0)


def test_shift():
    x = torch.randn(64, 64)
    torch.testing.assert_close(shift(x), x + 1.0)
'''

PYPROJECT = '''
[tool.maxcode]
{settings}

[tool.pytest.ini_options]
pythonpath = ["."]
'''


def make_project(pytester: pytest.Pytester, extra: str = "") -> Path:
    """Two marked targets and no seeds: each search is the reference's preparation only (fast)."""
    pytester.makepyfile(mylib=LIB, test_lib=TESTS)
    settings = [line for line in ("budget = 2", "torch_compile = false") if line.split()[0] not in extra]
    tables = extra.startswith("[")
    text = PYPROJECT.format(settings="\n".join(settings + ([] if tables else [extra])))
    (pytester.path / "pyproject.toml").write_text(text + (extra + "\n" if tables else ""))
    return pytester.path


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)


def output(result: pytest.RunResult) -> str:
    return result.stdout.str() + "\n" + result.stderr.str()


def maxcode_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in output(result).splitlines() if "maxcode" in line and ("error" in line.lower() or "ERROR" in line)]


# -- item 6: every [tool.maxcode] value is checked at start-up ------------------------------


@pytest.mark.parametrize(
    ("setting", "accepted"),
    [
        ('min_speedup = "fast"', "expected a number greater than 0"),
        ('device = "tpu"', "expected one of cpu, cuda"),
        ('torch_compile = "no"', "expected true or false"),
        ("budget = 0", "expected an integer, 1 or more"),
        ("k = 2.5", "expected an integer, 1 or more"),
        ('time = "long"', "expected a number greater than 0"),
        ("llm_cache = 1", "expected true or false"),
        ("apply = \"yes\"", "expected true or false"),
        ("max_tokens = -5", "expected an integer, 1 or more"),
        ("llm_retries = -1", "expected an integer, 0 or more"),
        ('temperature = "hot"', "expected a number, 0 or more"),
        ('executor = "cloud"', "expected one of local, ray"),
        ('rerank = "all"', "expected one of none, light, llm"),
        ('format = "rust"', "expected one of native, compat"),
        ("llm = 5", "expected a string"),
        ("target = 3", "expected a glob or a list of globs"),
        ('prices = "cheap"', "expected a table"),
        ('regressions = "big"', "expected a table"),
        ('qd = "on"', "expected a table"),
        ('programs = "a.cpp"', "expected a table"),
    ],
)
def test_a_bad_setting_is_one_usage_error_before_any_test(pytester: pytest.Pytester, setting: str, accepted: str) -> None:
    make_project(pytester, setting)
    result = run(pytester, "--maxcode")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output(result)[-3000:]
    key, value = (part.strip() for part in setting.split("=", 1))
    lines = [line for line in output(result).splitlines() if f"[tool.maxcode] {key} = {value}: {accepted}" in line]
    assert len(lines) == 1, output(result)[-3000:]
    assert "Traceback" not in output(result)
    assert "passed" not in result.stdout.str()  # before any test ran


def test_a_bad_table_value_is_one_usage_error(pytester: pytest.Pytester) -> None:
    make_project(pytester, '[tool.maxcode.prices]\nmymodel = {input = "x", output = 1}')
    result = run(pytester, "--maxcode")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "prices for 'mymodel': input = 'x' is not a number" in output(result)
    assert "Traceback" not in output(result)


def test_good_settings_are_converted_like_the_command_line(tmp_path: Path) -> None:
    from pytest_maxcode.options import load_settings

    (tmp_path / "pyproject.toml").write_text(
        '[tool.maxcode]\nmin-speedup = 2\ndevice = "cpu"\ntorch_compile = false\ntarget = "mylib.*"\ntemperature = 0\n')
    s = load_settings({}, tmp_path / "pyproject.toml")
    assert s.min_speedup == 2.0 and isinstance(s.min_speedup, float)
    assert s.device == "cpu" and s.torch_compile is False and s.target == ("mylib.*",) and s.temperature == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--maxcode-policy=nope",), "--maxcode-policy=nope: no such policy (built in: builtin, llm"),
        (("--maxcode-policy=llm",), "--maxcode-policy=llm needs a model"),
        (("--maxcode-strategy=nope",), "--maxcode-strategy=nope: no such strategy"),
    ],
)
def test_unknown_policy_or_strategy_is_a_usage_error(pytester: pytest.Pytester, args: tuple[str, ...], message: str) -> None:
    make_project(pytester)
    result = run(pytester, "--maxcode", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output(result)[-3000:]
    assert sum(message in line for line in output(result).splitlines()) == 1, output(result)[-3000:]
    assert "Traceback" not in output(result)


def test_a_plugins_policy_is_not_a_usage_error(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    pytester.makeconftest('''
class Nothing:
    name = "nothing"

    def propose(self, state, asks):
        return []


def pytest_maxcode_policy(name, target, settings):
    if name == "nothing":
        return Nothing()
''')
    result = run(pytester, "--maxcode", "--maxcode-policy=nothing", "--maxcode-target=mylib.double")
    assert result.ret == pytest.ExitCode.OK, output(result)[-3000:]


# -- item 7: an exit status a CI job can trust -----------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_model_exits_6_although_the_tests_passed(pytester: pytest.Pytester) -> None:
    make_project(pytester, "llm_retries = 0")
    llm = f"--maxcode-llm=openai:m@http://127.0.0.1:{_closed_port()}/v1"
    result = run(pytester, "--maxcode", llm, "--maxcode-target=mylib.double")
    assert result.ret == 6, output(result)[-3000:]
    result.stdout.fnmatch_lines(["*2 passed*"])
    lines = [line for line in result.stdout.lines if line.startswith("maxcode: the search of 1 target(s) failed: mylib.double:")]
    assert len(lines) == 1 and "cannot reach" in lines[0], output(result)[-3000:]
    report = json.loads((pytester.path / ".maxcode" / "reports" / "report.json").read_text())
    assert [t["status"] for t in report["targets"]] == ["failed"]
    assert "Traceback" not in output(result)


def test_a_target_pattern_that_matches_nothing_exits_6_and_keeps_the_report(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    reports = pytester.path / ".maxcode" / "reports"
    reports.mkdir(parents=True)
    (reports / "report.json").write_text('{"kept": true}')
    result = run(pytester, "--maxcode", "--maxcode-target=nonexistent")
    assert result.ret == 6, output(result)[-3000:]
    assert (reports / "report.json").read_text() == '{"kept": true}'
    lines = [line for line in result.stdout.lines if line.startswith("maxcode: --maxcode-target=nonexistent matched no target")]
    assert len(lines) == 1 and "mylib.double, mylib.shift" in lines[0], output(result)[-3000:]
    assert "Traceback" not in output(result)


def test_a_filtered_run_merges_into_the_report(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    first = run(pytester, "--maxcode")
    assert first.ret == 0, output(first)[-3000:]
    path = pytester.path / ".maxcode" / "reports" / "report.json"
    before = {t["id"]: t for t in json.loads(path.read_text())["targets"]}
    assert sorted(before) == ["mylib.double", "mylib.shift"]
    # a target that no longer reads (edited by hand, written by a newer version) is named and
    # left out; the others are still carried over
    data = json.loads(path.read_text())
    data["targets"].append({"id": "mylib.gone", "status": "great"})
    path.write_text(json.dumps(data))
    second = run(pytester, "--maxcode", "--maxcode-target=mylib.double")
    assert second.ret == 0, output(second)[-3000:]
    assert "unknown target status 'great'" in output(second) and "left out of this report" in output(second)
    after = {t["id"]: t for t in json.loads(path.read_text())["targets"]}
    assert sorted(after) == ["mylib.double", "mylib.shift"]
    assert after["mylib.shift"] == before["mylib.shift"]  # not selected: kept as it was
    assert after["mylib.double"]["elapsed_s"] != before["mylib.double"]["elapsed_s"]  # searched again
    from pytest_maxcode.report import validate

    assert validate(json.loads(path.read_text())) == []


# -- item 8 (store side): runs end finished, interrupted or killed ---------------------------------


def test_a_run_whose_process_is_gone_is_marked_killed_on_the_next_start(tmp_path: Path) -> None:
    db = tmp_path / "maxcode.db"
    code = f"from pathlib import Path; from pytest_maxcode.store import Store; Store(Path({str(db)!r})).begin_run('pytest --maxcode', '0')"
    subprocess.run([sys.executable, "-c", code], check=True)  # begins a run, never finishes it
    with Store(db) as store:
        run = store.begin_run("pytest --maxcode", "0")
        assert store.killed == [1]
        assert store.run(1)["status"] == "killed" and store.run(run)["status"] == "running"
        store.finish_run(run, "interrupted")
        assert store.run(run)["status"] == "interrupted" and store.run(run)["finished_at"]


def test_an_old_store_is_migrated_with_its_runs_statuses(tmp_path: Path) -> None:
    from pytest_maxcode.store.sqlite import MIGRATIONS

    db = tmp_path / "maxcode.db"
    con = sqlite3.connect(db)
    for sql in MIGRATIONS[:3]:
        con.executescript(sql)
    con.execute("PRAGMA user_version=3")
    con.execute("INSERT INTO runs(started_at, finished_at, command, tool_version) VALUES ('a', 'b', 'c', 'd')")
    con.commit()
    con.close()
    with Store(db) as store:
        assert store.run(1)["status"] == "finished"


# -- item 9: a damaged store ----------------------------------------------------------------------


def _damage(root: Path) -> Path:
    db = default_path(root)
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(bytes(range(256)) * 16)  # 4 KiB that are not SQLite
    db.with_name("maxcode.db-wal").write_bytes(b"torn")
    return db


def test_pytest_maxcode_moves_a_damaged_store_aside_and_starts_afresh(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    db = _damage(pytester.path)
    result = run(pytester, "--maxcode", "--maxcode-target=mylib.double")
    assert result.ret == 0, output(result)[-3000:]
    lines = [line for line in result.stdout.lines if "was damaged (file is not a database)" in line]
    assert len(lines) == 1 and lines[0].startswith("maxcode: warning:") and "started a fresh store" in lines[0]
    aside = sorted(db.parent.glob("maxcode.db.damaged-*"))
    assert [p.name.endswith("-wal") for p in aside] == [False, True]
    assert aside[0].read_bytes() == bytes(range(256)) * 16  # kept as it was
    assert aside[0].name in lines[0]
    with Store(db) as store:
        assert [r["status"] for r in store.runs()] == ["finished"]
    assert "Traceback" not in output(result)


@pytest.mark.parametrize("command", [["show"], ["value", "train"]])
def test_a_damaged_store_is_one_line_for_read_only_commands(tmp_path: Path, command: list[str]) -> None:
    db = _damage(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *command], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and f"maxcode: error: {db} is damaged" in r.stderr and "mv " in r.stderr
    assert db.read_bytes() == bytes(range(256)) * 16  # a read-only command leaves it where it is


# -- item 3: "best" is a faster node's speedup --------------------------------------------------


def test_best_so_far_counts_only_faster_nodes(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from pytest_maxcode.model.search import Node, Proposal
    from pytest_maxcode.oracle.verdict import Verdict
    from pytest_maxcode.session import _target_report

    def node(i: int, status: str, speedup: float | None) -> Node:
        v = Verdict(candidate=f"c{i}.cpp", status=status, speedup=speedup, speedup_ci=[0.5, 11.4] if speedup else None, hash=f"h{i}")
        return Node(index=i, proposal=Proposal(spec=None, origin="seed"), verdict=v, reward=0.0, depth=0, step=0, id=i)

    (tmp_path / "lib.py").write_text("def f(x):\n    return x\n")
    nodes = [node(0, "faster", 2.0), node(1, "not_faster", 8.9), node(2, "wrong", None), node(3, "faster", 3.0)]
    target = SimpleNamespace(id="lib.f", module="lib", qualname="f", source_file=tmp_path / "lib.py", inplace=False)
    result = SimpleNamespace(state=SimpleNamespace(trajectory=nodes, best=None), target=target, strategy="sweep", policy="builtin",
                             llm=None, observation=None, critic="rules", stop_reason="the budget is spent", llm_calls=0, tokens=0,
                             cost_usd=0.0, elapsed_s=1.0, workloads=[], error=None, device="cpu")
    entry = _target_report(result, "lib.f", [], tmp_path).to_json()
    assert [t["best_so_far"] for t in entry["trajectory"]] == [2.0, 2.0, 2.0, 3.0]
    assert entry["candidates"]["failed"] == {"wrong": 1}


# -- item 10: maxcode status under MAXCODE_DISABLE; tables at 80 columns ---------------------------


def _locked_project(root: Path, target: str = "mylib.double") -> None:
    import hashlib

    from pytest_maxcode.targets.accept import reference_hash_in_file
    from pytest_maxcode.targets.lock import LockEntry, write_lock

    (root / "mylib.py").write_text(LIB)
    kernel = root / "maxcode_kernels" / f"{target}.cpp"
    kernel.parent.mkdir(parents=True, exist_ok=True)
    kernel.write_text("// a kernel\n")
    qualname = target.split(".")[-1]
    entry = LockEntry(target, reference_hash_in_file(root / "mylib.py", qualname) or "", f"maxcode_kernels/{target}.cpp",
                      hashlib.sha256(kernel.read_bytes()).hexdigest(), "cpp", "cpu", "x86_64", 3.5, [3.1, 3.9],
                      "2026-01-01", "0.1.0", extra={"reference_file": "mylib.py", "qualname": qualname})
    write_lock(root / "maxcode.lock", {target: entry})


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    full = dict(os.environ, COLUMNS="80", **env)
    full.pop("MAXCODE_DISABLE", None) if "MAXCODE_DISABLE" not in env else None
    return subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=cwd, capture_output=True, text=True, env=full)


def test_status_says_disabled_under_maxcode_disable(tmp_path: Path) -> None:
    _locked_project(tmp_path)
    active = _cli(["status", "--json"], tmp_path)
    assert active.returncode == 0 and json.loads(active.stdout)[0]["state"] == "active", active.stderr
    disabled = _cli(["status", "--json"], tmp_path, MAXCODE_DISABLE="1")
    row = json.loads(disabled.stdout)[0]
    assert disabled.returncode == 0 and row["state"] == "disabled" and row["reason"].startswith("MAXCODE_DISABLE is set")
    table = _cli(["status"], tmp_path, MAXCODE_DISABLE="1")
    assert table.returncode == 0 and " disabled " in table.stdout and "active" not in table.stdout.replace("else active", "")


def test_status_quotes_the_command_that_re_measures_each_active_speedup(tmp_path: Path) -> None:
    _locked_project(tmp_path)
    r = _cli(["status"], tmp_path)  # a fresh clone: the lock came along, the captured inputs did not
    assert r.returncode == 0 and r.stdout.splitlines()[-2:] == [
        "1 active target(s) cannot be re-measured here: that needs the",
        "  report of a pytest --maxcode run that quotes the lock's kernel, and its inputs"], r.stdout
    inputs = tmp_path / ".maxcode" / "inputs" / "mylib.double"
    inputs.mkdir(parents=True)
    (inputs / "w0.pt").write_bytes(b"captured")
    candidate = tmp_path / ".maxcode" / "candidates" / "mylib.double" / "k.cpp"
    candidate.parent.mkdir(parents=True)
    candidate.write_text("// a kernel\n")  # the lock's kernel, as the last run's report quotes it
    report = {"targets": [{"id": "mylib.double", "speedup": 3.5, "speedup_ci": [3.1, 3.9], "reference": {"file": "mylib.py"},
                           "best": {"source_path": ".maxcode/candidates/mylib.double/k.cpp"}}]}
    (tmp_path / ".maxcode" / "reports").mkdir()
    (tmp_path / ".maxcode" / "reports" / "report.json").write_text(json.dumps(report))
    r = _cli(["status"], tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[-2:] == [
        "re-measure mylib.double: maxcode remeasure mylib.double --repeat 5", "  (each repeat should land in [3.10, 3.90])"]
    (row,) = json.loads(_cli(["status", "--json"], tmp_path).stdout)
    assert row["remeasure"] == {"command": "maxcode remeasure mylib.double --repeat 5", "expect": [3.1, 3.9]}
    sub = tmp_path / "docs"
    sub.mkdir()
    (row,) = json.loads(_cli(["status", "--json"], sub).stdout)  # remeasure reads the project's .maxcode
    assert row["remeasure"]["command"] == "cd .. && maxcode remeasure mylib.double --repeat 5"
    report["targets"][0]["speedup_ci"] = [3.0, 3.6]  # a later run measured the same kernel again
    (tmp_path / ".maxcode" / "reports" / "report.json").write_text(json.dumps(report))
    (row,) = json.loads(_cli(["status", "--json"], tmp_path).stdout)
    assert row["remeasure"]["expect"] == [3.0, 3.6]  # what remeasure will check against
    candidate.write_text("// another kernel\n")  # the report quotes a kernel the lock did not accept
    (row,) = json.loads(_cli(["status", "--json"], tmp_path).stdout)
    assert row["remeasure"] is None
    for broken in ({"targets": 3}, [1], {"targets": [{"id": "mylib.double", "speedup": 3, "speedup_ci": 1.5,
                                                      "best": {"source_path": "/dev/zero"}}]}):
        (tmp_path / ".maxcode" / "reports" / "report.json").write_text(json.dumps(broken))
        r = _cli(["status"], tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr and "cannot be re-measured here" in r.stdout, r.stderr


def test_show_quotes_the_command_that_re_measures_the_best_node(tmp_path: Path) -> None:
    code = "// the best kernel\n"
    with Store(default_path(tmp_path)) as store:
        run = store.begin_run("pytest --maxcode", "0")
        for h, source, speedup in (("a" * 64, code, 2.5), ("b" * 64, "// slower\n", 1.5)):
            store.add_candidate(h, "native", "cpp", source, "seed")
            store.add_node(NodeRow(run_id=run, target_id="mylib.double", parent_id=None, strategy="sweep", policy="builtin",
                                   step=0, depth=0, origin="seed", candidate_hash=h, status="faster", reward=speedup,
                                   speedup=speedup, candidate_s=1e-3, reasons=[], llm_call_id=None))
        store.finish_run(run)
    r = _cli(["show", "mylib.double"], tmp_path)
    assert r.returncode == 0 and "re-measure" not in r.stdout, r.stdout  # no report, no inputs: nothing to promise
    (tmp_path / ".maxcode" / "inputs" / "mylib.double").mkdir(parents=True)
    (tmp_path / ".maxcode" / "inputs" / "mylib.double" / "w0.pt").write_bytes(b"captured")
    (tmp_path / ".maxcode" / "k.cpp").write_text(code)
    report = {"targets": [{"id": "mylib.double", "speedup": 2.4, "speedup_ci": [2.2, 2.6], "reference": {"file": "mylib.py"},
                           "best": {"source_path": ".maxcode/k.cpp"}}]}
    (tmp_path / ".maxcode" / "reports").mkdir()
    (tmp_path / ".maxcode" / "reports" / "report.json").write_text(json.dumps(report))
    r = _cli(["show", "mylib.double"], tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[-2:] == [
        "re-measure #1: maxcode remeasure mylib.double --repeat 5", "  (each repeat should land in [2.20, 2.60])"], r.stdout


def test_status_table_fits_80_columns_without_breaking_words(tmp_path: Path) -> None:
    _locked_project(tmp_path, "mylib.shift")
    (tmp_path / "maxcode_kernels" / "mylib.shift.cpp").write_text("// edited after it was verified\n")
    r = _cli(["status"], tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, r.stdout
    assert any(" stale " in line for line in lines), r.stdout  # the state column is never wrapped


def test_show_target_list_fits_80_columns(tmp_path: Path) -> None:
    db = default_path(tmp_path)
    with Store(db) as store:
        run = store.begin_run("pytest --maxcode", "0")
        for status, speedup in (("faster", 2.5), ("not_faster", 8.9)):
            store.add_node(NodeRow(run_id=run, target_id="a_rather_long_package.submodule.fused_bias_relu_kernel", parent_id=None,
                           strategy="sweep", policy="builtin", step=0, depth=0, origin="seed", candidate_hash=None, status=status,
                           reward=speedup, speedup=speedup, candidate_s=1e-3, reasons=[], llm_call_id=None))
        store.finish_run(run)
    r = _cli(["show"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    assert "2.50x" in r.stdout and "8.90x" not in r.stdout  # a not_faster node is never "best"
    assert "last run" in r.stdout


def test_check_verdict_table_fits_80_columns(project: Path) -> None:
    r = _cli(["check", "ref.py", "good.cpp", "broken.cpp", "--time-budget", "0.1", "--timeout", "30"], project)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, r.stdout
    assert any("compile_error" in line and "broken.cpp" in line for line in lines), r.stdout
    assert any(("faster" in line or "not_faster" in line) and "good.cpp" in line for line in lines), r.stdout
