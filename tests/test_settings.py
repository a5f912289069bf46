"""``Settings``: one frozen, typed record built from the one options table, resolved once per
run; named profiles in pyproject.toml (``[tool.maxcode.profiles.NAME]``), as Hypothesis has."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import subprocess
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_first_hour import LIB, TESTS  # the same small project as the first-hour tests

from pytest_maxcode import options, tables
from pytest_maxcode.options import Settings, load_settings

PROFILES = '''
[tool.maxcode]
budget = 3
k = 3
min_speedup = 1.2

[tool.maxcode.profiles.ci]
budget = 5
k = 6
target = "mylib.*"

[tool.maxcode.profiles.gpu]
device = "cuda"
'''


def _isinstance(value: Any, hint: Any) -> bool:
    """``isinstance`` for the hints the table uses: X | None, tuple[str, ...], Mapping[...]."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_isinstance(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(_isinstance(v, typing.get_args(hint)[0]) for v in value)
    if origin is not None:
        return isinstance(value, origin if origin is not Mapping else Mapping)
    if hint is float:
        return isinstance(value, float)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


# -- the record -----------------------------------------------------------------------------------


def test_settings_are_frozen() -> None:
    s = load_settings({}, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.budget = 3  # type: ignore[misc]
    changed = s.replace(budget=3)
    assert (s.budget, changed.budget) == (8, 3)


def test_every_table_option_is_a_typed_field_with_its_default(tmp_path: Path) -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert [o.name for o in options.TABLE] == list(fields)
    hints = typing.get_type_hints(Settings)
    defaults = Settings()
    for opt in options.TABLE:
        assert fields[opt.name].default == opt.default == getattr(defaults, opt.name), opt.name
        assert opt.name in hints, opt.name
    # after loading, every value has its field's type (the device resolved to cpu or cuda)
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode]\nmin_speedup = 2\ntarget = "a.*"\naccept_range_limited = ["a.*"]\n'
                                             'qd = {stages = [{techniques = "any"}]}\n')
    loaded = load_settings({"seed": 4, "time": 30}, tmp_path / "pyproject.toml")
    for name, hint in hints.items():
        assert _isinstance(getattr(loaded, name), hint), (name, getattr(loaded, name), hint)
    assert loaded.device == "cpu" and loaded.min_speedup == 2.0 and loaded.target == ("a.*",) and loaded.time == 30.0


def test_every_front_end_renders_the_table(pytestconfig: pytest.Config) -> None:
    check = argparse.ArgumentParser()
    options.add_to_argparse(check, options.CHECK)
    check_dests = {a.dest for a in check._actions}
    for opt in options.TABLE:
        assert opt.scopes, opt.name
        try:  # the plugin's options, as this very pytest run registered them
            pytestconfig.getoption(f"maxcode_{opt.name}")
            in_pytest = True
        except ValueError:
            in_pytest = False
        assert in_pytest == (options.PYTEST in opt.scopes), opt.name
        assert (opt.name in check_dests) == (options.CHECK in opt.scopes), opt.name
        assert (opt.name in options.SETTINGS_DEFAULTS) == (options.FILE in opt.scopes), opt.name
    assert pytestconfig.getoption("maxcode_profile") is None and "profile" in check_dests
    assert "profile" not in options.SETTINGS_DEFAULTS  # a profile is chosen, not configured
    # an option not given leaves the lower layers' value: argparse's default is always None
    ns = check.parse_args([])
    assert all(getattr(ns, o.name) is None for o in options.for_scope(options.CHECK))


def test_one_definition_of_the_default_min_speedup() -> None:
    assert options.MIN_SPEEDUP == Settings().min_speedup == load_settings({}, None).min_speedup == 1.05
    opt = next(o for o in options.TABLE if o.name == "min_speedup")
    assert "(default 1.05)" in opt.kwargs()["help"]


def test_the_device_is_resolved_once() -> None:
    assert load_settings({}, None).device == "cpu"
    assert load_settings({}, None, auto_device="cuda").device == "cuda"
    assert load_settings({"device": "cpu"}, None, auto_device="cuda").device == "cpu"
    s = load_settings({"device": "cpu"}, None)
    assert s.device_for("cuda") == "cuda" and s.device_for("cpp") == "cpu" and s.device_for("auto") == "cpu"
    assert load_settings({"device": "cuda"}, None).device_for("cpp") == "cuda"


def test_a_search_checks_with_the_runs_timing_budget_and_the_targets_own_bar(tmp_path: Path) -> None:
    # time_budget was maxcode check's alone: a search always timed 0.5 s per candidate and workload
    from pytest_maxcode.search.loop import check_config
    from pytest_maxcode.search.policy import TargetInfo

    settings = load_settings({"time_budget": 0.1, "min_speedup": 1.2}, None)
    plain = TargetInfo("m.f", "m", "f", tmp_path / "m.py", "function", atol=1e-3)
    c = check_config(plain, settings)
    assert (c.time_budget, c.min_speedup, c.atol, c.device) == (0.1, 1.2, 1e-3, "cpu")
    own = TargetInfo("m.f", "m", "f", tmp_path / "m.py", "function", min_speedup=1.5)
    assert check_config(own, settings).min_speedup == 1.5
    assert check_config(plain, load_settings({}, None)).time_budget == 0.5


def test_defaults_live_in_the_table_not_at_call_sites() -> None:
    s = load_settings({}, None)
    assert (s.k, s.width, s.llm_concurrency, s.rerank, s.format, s.observation) == (4, 2, 4, "none", "native", "trajectory+best")
    assert s.rerank_count() == 2 and s.replace(k=1).rerank_count() == 1 and s.replace(rerank_top=3).rerank_count() == 3


def test_a_value_a_caller_passes_is_checked_like_the_files() -> None:
    with pytest.raises(ValueError, match=r"^budget must be an integer, 1 or more, not 0$"):
        load_settings({"budget": 0}, None)
    with pytest.raises(ValueError, match=r"^rerank must be none, light or llm, not 'all'$"):
        load_settings({"rerank": "all"}, None)
    with pytest.raises(ValueError, match=r"observation 'tree'"):
        load_settings({"observation": "tree"}, None)


# -- profiles -------------------------------------------------------------------------------------


def test_profile_precedence_command_line_profile_file_defaults(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PROFILES)
    base = load_settings({}, pyproject)
    assert (base.budget, base.k, base.min_speedup, base.target, base.width) == (3, 3, 1.2, (), 2)
    ci = load_settings({"profile": "ci"}, pyproject)
    assert (ci.budget, ci.k, ci.min_speedup, ci.target, ci.width, ci.profile) == (5, 6, 1.2, ("mylib.*",), 2, "ci")
    cli = load_settings({"profile": "ci", "k": 7, "target": ["other.f"]}, pyproject)
    assert (cli.budget, cli.k, cli.target) == (5, 7, ("other.f",))
    assert load_settings({"profile": "gpu"}, pyproject).device == "cuda"
    assert load_settings({"profile": "gpu", "device": "cpu"}, pyproject).device == "cpu"


def test_an_unknown_profile_is_one_line(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PROFILES)
    with pytest.raises(ValueError, match=r"pyproject.toml: no profile 'nightly' \(profiles: ci, gpu\); add \[tool.maxcode.profiles.nightly\]$"):
        load_settings({"profile": "nightly"}, pyproject)
    with pytest.raises(ValueError, match=r"^profile 'ci': there is no pyproject.toml"):
        load_settings({"profile": "ci"}, tmp_path / "missing" / "pyproject.toml")


def test_every_profile_is_checked_with_the_options_parsers(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PROFILES + '\n[tool.maxcode.profiles.slow]\nmin_speedup = "fast"\n')
    with pytest.raises(ValueError, match=r'\[tool.maxcode.profiles.slow\] min_speedup = "fast": expected a number greater than 0$'):
        load_settings({}, pyproject)  # not selected, still checked: CI's profile fails on a laptop too
    pyproject.write_text(PROFILES + "\n[tool.maxcode.profiles.ci.qd]\nstages = [{steps = 0}]\n")
    with pytest.raises(ValueError, match=r"stage 1 steps must be a positive integer, not 0"):
        load_settings({"profile": "ci"}, pyproject)
    pyproject.write_text(PROFILES + "\n[tool.maxcode.profiles.ci]\nbudgett = 1\n")
    with pytest.raises(ValueError):  # TOML itself refuses a table defined twice
        load_settings({}, pyproject)
    pyproject.write_text('[tool.maxcode.profiles.x]\nbudgett = 1\n')
    with pytest.raises(ValueError, match=r"\[tool.maxcode.profiles.x\] has no setting 'budgett'"):
        load_settings({}, pyproject)
    pyproject.write_text('[tool.maxcode]\nprofiles = "ci"\n')
    with pytest.raises(ValueError, match=r"\[tool.maxcode\] profiles: expected tables, one per profile"):
        load_settings({}, pyproject)


# -- the bottom layer ------------------------------------------------------------------------------


def test_options_imports_nothing_above_it(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "p.cpp").write_text("int main() { return 0; }\n")
    (tmp_path / "cases").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.maxcode]\nobservation = "trajectory+best"\nqd = {stages = [{techniques = "any"}]}\n'
        '[tool.maxcode.programs.p]\nsource = "src/p.cpp"\ntestcases = "cases"\n')
    code = ("import json, sys\nfrom pathlib import Path\nfrom pytest_maxcode import options\n"
            f"options.load_settings({{'profile': None}}, Path({str(tmp_path / 'pyproject.toml')!r}))\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pytest_maxcode'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    # the package's own __init__ brings the decorator (targets); loading the settings adds no search
    assert "pytest_maxcode.tables" in loaded and not [m for m in loaded if m.startswith("pytest_maxcode.search")], loaded
    assert "pytest_maxcode.targets.program" not in loaded
    # and the source says so: options and tables import each other and errors only (the price and
    # regression tables' parsers are imported only when such a table is set)
    for name in ("options", "tables"):
        tree = ast.parse((Path(options.__file__).parent / f"{name}.py").read_text())
        used = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert used <= {"tables", "errors", "llm.pricing", "bot.compare"}, (name, used)


def test_the_stage_vocabulary_is_the_techniques() -> None:
    from pytest_maxcode.search import observation, techniques
    from pytest_maxcode.search.strategies import qd
    from pytest_maxcode.targets import program

    assert tables.TECHNIQUES == techniques.NAMES and tables.LOOP == techniques.LOOP
    assert qd.parse_stages is tables.parse_stages and observation.parse_observation is tables.parse_observation
    assert program.parse_programs is tables.parse_programs


# -- the front ends' errors (a project run in a subprocess, as a user runs it) ----------------------


def _project(pytester: pytest.Pytester, profiles: str) -> None:
    pytester.makepyfile(mylib=LIB, test_lib=TESTS)
    (pytester.path / "pyproject.toml").write_text(
        '[tool.maxcode]\nbudget = 2\ntorch_compile = false\n\n[tool.pytest.ini_options]\npythonpath = ["."]\n\n' + profiles)


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, str]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)
    return result, result.stdout.str() + "\n" + result.stderr.str()


def test_an_unknown_profile_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    _project(pytester, "[tool.maxcode.profiles.ci]\nbudget = 1\n")
    result, out = _run(pytester, "--maxcode", "--maxcode-profile=nightly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    lines = [line for line in out.splitlines() if "no profile 'nightly' (profiles: ci); add [tool.maxcode.profiles.nightly]" in line]
    assert len(lines) == 1 and "Traceback" not in out and "passed" not in result.stdout.str(), out[-3000:]


def test_a_bad_value_in_a_profile_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    _project(pytester, '[tool.maxcode.profiles.ci]\nmin_speedup = "fast"\n')
    result, out = _run(pytester, "--maxcode", "--maxcode-profile=ci")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    expected = 'pyproject.toml: [tool.maxcode.profiles.ci] min_speedup = "fast": expected a number greater than 0'
    assert sum(expected in line for line in out.splitlines()) == 1, out[-3000:]
    assert "Traceback" not in out and "passed" not in result.stdout.str()


def test_a_profile_reaches_the_run(pytester: pytest.Pytester) -> None:
    _project(pytester, '[tool.maxcode.profiles.quick]\nbudget = 1\ntarget = "mylib.double"\n')
    result, out = _run(pytester, "--maxcode", "--maxcode-profile=quick")
    assert result.ret == pytest.ExitCode.OK, out[-3000:]
    report = json.loads((pytester.path / ".maxcode" / "reports" / "report.json").read_text())
    assert report["options"]["budget"] == 1 and report["options"]["device"] == "cpu"
    assert [t["id"] for t in report["targets"]] == ["mylib.double"]


def test_maxcode_check_takes_a_profile(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode.profiles.ci]\nmin_speedup = 0\n')
    (tmp_path / "ref.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "c.cpp").write_text("int x;\n")
    run = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py:f", "c.cpp", "--profile", "ci"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "[tool.maxcode.profiles.ci] min_speedup = 0: expected a number greater than 0" in run.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode.profiles.ci]\nmin_speedup = 1.5\n')
    run = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py:f", "c.cpp", "--profile", "gpu"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2 and "no profile 'gpu' (profiles: ci)" in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_a_key_is_spelled_like_its_flag_or_its_field(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    for text in ('[tool.maxcode]\njson = "r.json"\n', '[tool.maxcode]\njson_path = "r.json"\n', '[tool.maxcode]\nmin-speedup = 2\njson = "r.json"\n'):
        pyproject.write_text(text)
        assert load_settings({}, pyproject).json_path == "r.json"
    pyproject.write_text('[tool.maxcode]\nprofile = "ci"\n')
    with pytest.raises(ValueError, match=r"\[tool.maxcode\] has no setting 'profile' \(known: accept_range_limited, apply, budget"):
        load_settings({}, pyproject)
