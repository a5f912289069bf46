"""The settings that are tables (``prices``, ``qd``, ``regressions``, ``programs``) are parsed
once, when the settings are loaded, into ``tables``' frozen types; the code that uses them reads
those, and a bad table is still one line naming what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maxcode import tables
from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.llm.pricing import Prices
from pytest_maxcode.options import Settings, load_settings
from pytest_maxcode.rl import Curriculum
from pytest_maxcode.tables import Price, ProgramTarget, Regressions, Schedule, Stage

TABLES = '''
[tool.maxcode.prices]
my-model = {input = 1, output = 2}

[tool.maxcode.qd]
stages = [{steps = 2, techniques = ["loop"]}, {techniques = "any"}]

[tool.maxcode.qd.targets."lib.soft*"]
stages = [{steps = 1, techniques = ["threads"]}, {techniques = "any"}]

[tool.maxcode.qd.targets."lib.*"]
stages = [{techniques = ["tiling"]}]

[tool.maxcode.regressions]
threshold = 0.2
thresholds = {"test_io*" = 0.5}
runs = 3

[tool.maxcode.programs.sums]
source = "src/sums.cpp"
testcases = "cases"
timer = "instructions"
'''

PROFILE = '''
[tool.maxcode.profiles.ci.qd]
stages = [{techniques = "any"}]

[tool.maxcode.profiles.ci.regressions]
timer = "instructions"

[tool.maxcode.profiles.ci.prices]
other-model = {input = 3, output = 4}
'''


def project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "sums.cpp").write_text("int main() { return 0; }\n")
    (tmp_path / "cases").mkdir(exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path / "pyproject.toml"


def test_the_four_tables_are_typed_after_loading(tmp_path: Path) -> None:
    s = load_settings({}, project(tmp_path, TABLES))
    assert s.prices == {"my-model": Price(1.0, 2.0, 1.0, 0.1)}
    assert isinstance(s.qd, Schedule)
    assert s.qd.stages == (Stage(frozenset({"loop"}), 2), Stage(None, None))
    assert [pattern for pattern, _ in s.qd.targets] == ["lib.soft*", "lib.*"]  # the table's order
    assert s.regressions == Regressions(0.2, {"test_io*": 0.5}, "time", 3)
    assert s.programs == (ProgramTarget("sums", Path("src/sums.cpp"), Path("cases"), timer="instructions"),)
    # a copy keeps them as they are, parsed once
    changed = s.replace(budget=2)
    assert changed.qd is s.qd and changed.regressions is s.regressions and changed.programs == s.programs
    assert changed.prices == s.prices


def test_a_schedule_gives_each_target_its_first_matching_globs_stages(tmp_path: Path) -> None:
    schedule = load_settings({}, project(tmp_path, TABLES)).qd
    assert schedule is not None
    assert schedule.for_target("lib.softmax") == [Stage(frozenset({"loop", "threads"}), 1), Stage(None, None)]
    assert schedule.for_target("lib.chain") == [Stage(frozenset({"loop", "tiling"}), None)]
    assert schedule.for_target("other.f") == schedule.for_target(None) == list(schedule.stages)
    # the old entry point is the same rule, over a table or a schedule
    raw = {"stages": [{"techniques": "any"}], "targets": {"a*": {"stages": [{"techniques": ["loop"]}]}}}
    assert tables.parse_stages(raw, "ab") == tables.parse_stages(tables.parse_schedule(raw), "ab") == [Stage(frozenset({"loop"}), None)]
    assert tables.parse_stages(None, "ab") == [] and Schedule().for_target("ab") == []


def test_a_profiles_table_replaces_the_bases_whole(tmp_path: Path) -> None:
    pyproject = project(tmp_path, TABLES + PROFILE)
    base, ci = load_settings({}, pyproject), load_settings({"profile": "ci"}, pyproject)
    assert ci.qd == Schedule((Stage(None, None),), ())  # the base's per-target schedules are gone too
    assert ci.regressions == Regressions(timer="instructions", thresholds={})  # not merged with the base's threshold
    assert ci.prices is not None and set(ci.prices) == {"other-model"}
    assert ci.programs == base.programs  # not in the profile: the base's


@pytest.mark.parametrize(("table", "message"), [
    ('[tool.maxcode.prices]\nm = {input = "x", output = 1}\n', "{pyproject}: prices for 'm': input = 'x' is not a number"),
    ('[tool.maxcode.regressions]\nruns = 1\n', "{pyproject}: [tool.maxcode.regressions] runs must be a whole number of at least 2, not 1"),
    ('[tool.maxcode.regressions]\nfork_server = "no"\n', "{pyproject}: [tool.maxcode.regressions] fork_server must be true or false, not 'no'"),
    ('[tool.maxcode.qd]\nstages = [{steps = 0}]\n', "[tool.maxcode.qd] stages: stage 1 steps must be a positive integer, not 0"),
    ('[tool.maxcode.qd]\ntargets = {"a*" = {steps = 1}}\n', "[tool.maxcode.qd.targets.'a*'] needs stages = [...]"),
    ('[tool.maxcode.programs.p]\nsource = "src/sums.cpp"\ntestcases = "nowhere"\n', "[tool.maxcode.programs.p]: testcases nowhere: no such folder"),
    ('[tool.maxcode.profiles.ci.qd]\nstage = []\n', "[tool.maxcode.qd] has no setting 'stage'"),
])
def test_a_bad_table_is_still_one_line(tmp_path: Path, table: str, message: str) -> None:
    pyproject = project(tmp_path, table)
    with pytest.raises(ValueError) as e:
        load_settings({"profile": "ci"} if "profiles.ci" in table else {}, pyproject)
    assert str(e.value).startswith(message.format(pyproject=pyproject)) and "\n" not in str(e.value), str(e.value)


def test_settings_built_directly_parse_their_tables_and_refuse_a_raw_programs_table(tmp_path: Path) -> None:
    s = Settings(prices={"m": {"input": 1, "output": 2}}, qd={"stages": [{"techniques": "any"}]}, regressions={"runs": 4})
    assert s.prices == {"m": Price(1.0, 2.0, 1.0, 0.1)} and s.qd == Schedule((Stage(None, None),))
    assert s.regressions == Regressions(runs=4, thresholds={})
    assert Settings(prices=s.prices, qd=s.qd, regressions=s.regressions) == s  # parsed values are kept
    with pytest.raises(ValueError, match=r"^\[tool.maxcode.regressions\] has no setting 'limit'"):
        Settings(regressions={"limit": 1})
    with pytest.raises(TypeError, match="load_settings") as e:
        Settings(programs={"p": {"source": "src/p.cpp", "testcases": "cases"}})
    assert "\n" not in str(e.value)
    target = ProgramTarget("p", Path("src/p.cpp"), Path("cases"))
    assert Settings(programs=[target]).programs == (target,)
    with pytest.raises(ValueError, match="give load_settings the project's pyproject.toml"):
        load_settings({"programs": {"p": {"source": "src/p.cpp", "testcases": "cases"}}}, None)


def test_the_users_take_the_parsed_values(tmp_path: Path) -> None:
    s = load_settings({}, project(tmp_path, TABLES))
    prices = Prices(s.prices)
    assert prices.price("my-model-2") is s.prices["my-model"] and "my-model" in prices.overridden
    with pytest.raises(MaxcodeError, match="prices for 'm'"):
        Prices({"m": {"output": 1}})  # a raw entry is still parsed, and a bad one is still one line
    curriculum = Curriculum(s.qd, advance_after=1)
    assert curriculum.stages("lib.softmax") == s.qd.for_target("lib.softmax")
    assert curriculum.stages("x.y") == list(s.qd.stages)


def test_the_users_do_not_parse_the_tables_again() -> None:
    """The search, the session, the CLI and the LLM set-up read the typed fields: no table parser
    is named there (a second parse could disagree with the first, or fail late)."""
    package = Path(tables.__file__).parent
    parsers = ("parse_stages", "parse_schedule", "parse_programs", "parse_regressions", "parse_prices", "parse_price")
    for module in ("search/loop.py", "session.py", "cli.py", "llm/config.py"):
        text = (package / module).read_text()
        assert not [p for p in parsers if p in text], module
