"""The parsers of the settings that are more than one value, and the frozen types they give:
the qd strategy's staged schedules (``[tool.maxcode.qd]``: ``Schedule``), program targets
(``[tool.maxcode.programs]``: ``ProgramTarget``), the regression gate
(``[tool.maxcode.regressions]``: ``Regressions``), LLM prices (``prices``: ``Price``) and the
observation parts of ``--maxcode-observation``.

The bottom layer, beside ``options``: plain data and pure functions, importing nothing of the
package, so the settings are parsed once, when they are loaded, without ``options`` importing
the search or the targets, which read the parsed values. Each parser returns a value it is given
already parsed as it is, so a ``Settings`` built from either is the same.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# -- the qd strategy's staged schedules ------------------------------------------------------------

LOOP = "loop"
#: the techniques a stage may permit, in ``search.techniques``'s order (``loop`` is what every
#: candidate may do); tests/test_settings.py checks the two lists agree
TECHNIQUES: tuple[str, ...] = (LOOP, "tiling", "shared_memory", "vectorized", "unrolled", "threads", "reduction")


@dataclass(frozen=True)
class Stage:
    techniques: frozenset[str] | None  # None: anything
    steps: int | None  # None: the rest of the search

    def permitted(self) -> tuple[str, ...] | None:
        return None if self.techniques is None else tuple(t for t in TECHNIQUES if t in self.techniques)

    def describe(self) -> str:
        return "any technique" if self.techniques is None else ", ".join(self.permitted() or ())


@dataclass(frozen=True)
class Schedule:
    """``[tool.maxcode.qd]`` parsed: the default stages, and each target glob's own stages in the
    table's order (the first glob that matches a target id wins)."""

    stages: tuple[Stage, ...] = ()
    targets: tuple[tuple[str, tuple[Stage, ...]], ...] = ()

    def for_target(self, target_id: str | None) -> list[Stage]:
        """The stages of ``target_id``: its first matching glob's, else the default ones."""
        if target_id is not None:
            for pattern, stages in self.targets:
                if fnmatch.fnmatchcase(target_id, pattern):
                    return list(stages)
        return list(self.stages)

    def schedules(self) -> list[tuple[Stage, ...]]:
        """Every schedule in it, the default one first."""
        return [self.stages, *(stages for _, stages in self.targets)]


def parse_schedule(config: Any) -> Schedule:
    """The ``qd`` setting, every schedule in it checked; ValueError says what to fix. A
    ``Schedule`` is returned as it is."""
    if isinstance(config, Schedule):
        return config
    if not isinstance(config, Mapping):
        raise ValueError("[tool.maxcode.qd] must be a table: stages = [{steps = N, techniques = [...]}, ...]")
    unknown = set(config) - {"stages", "targets"}
    if unknown:
        raise ValueError(f"[tool.maxcode.qd] has no setting {sorted(unknown)[0]!r} (known: stages, targets)")
    raw_targets = config.get("targets") or {}
    if not isinstance(raw_targets, Mapping):
        raise ValueError("[tool.maxcode.qd] targets must be a table: [tool.maxcode.qd.targets.\"GLOB\"] with stages = [...]")
    for pattern, table in raw_targets.items():
        if not isinstance(table, Mapping) or "stages" not in table:
            raise ValueError(f"[tool.maxcode.qd.targets.{pattern!r}] needs stages = [...]")
    targets = tuple((str(pattern), tuple(_stages(table["stages"], f"[tool.maxcode.qd.targets.{pattern!r}] stages")))
                    for pattern, table in raw_targets.items())
    default = config.get("stages")
    return Schedule(tuple(_stages(default, "[tool.maxcode.qd] stages")) if default is not None else (), targets)


def parse_stages(config: Any, target_id: str | None = None) -> list[Stage]:
    """The schedule for ``target_id`` from the ``qd`` setting (a table or a ``Schedule``)."""
    return [] if config is None else parse_schedule(config).for_target(target_id)


def _stages(raw: Any, where: str) -> list[Stage]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where} must be a non-empty list of tables {{steps = N, techniques = [...]}}")
    out = []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, Mapping) or set(item) - {"steps", "techniques"}:
            raise ValueError(f"{where}: stage {i} must be a table with steps and techniques, not {item!r}")
        steps = item.get("steps")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
            raise ValueError(f"{where}: stage {i} steps must be a positive integer, not {steps!r}")
        if steps is None and i < len(raw):
            raise ValueError(f"{where}: stage {i} needs steps (only the last stage may run to the end)")
        techniques = item.get("techniques", "any")
        if techniques == "any":
            out.append(Stage(None, steps))
            continue
        if not isinstance(techniques, list) or not all(isinstance(t, str) for t in techniques):
            raise ValueError(f"{where}: stage {i} techniques must be \"any\" or a list of names ({', '.join(TECHNIQUES)})")
        bad = [t for t in techniques if t not in TECHNIQUES]
        if bad:
            raise ValueError(f"{where}: stage {i}: unknown technique {bad[0]!r} (known: {', '.join(TECHNIQUES)})")
        out.append(Stage(frozenset(techniques) | {LOOP}, steps))
    return out


# -- what of the search the prompt shows -----------------------------------------------------------

PARTS = ("feedback", "trajectory", "best", "critique")


def parse_observation(setting: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in setting.split("+") if p.strip())
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"observation {setting!r}: use parts from {', '.join(PARTS)} joined with '+', e.g. trajectory+best")
    return parts


# -- program targets -------------------------------------------------------------------------------

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx")
DEFAULT_CXXFLAGS = "-O3 --std=c++17"
PROGRAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
PROGRAM_KEYS = ("source", "testcases", "cxxflags", "timeout", "timer", "rounds", "budget", "min_speedup", "tests")


@dataclass(frozen=True)
class ProgramTarget:
    id: str
    source: Path  # relative to the project root
    testcases: Path  # relative to the project root
    cxxflags: tuple[str, ...] = tuple(DEFAULT_CXXFLAGS.split())
    timeout: float = 10.0  # seconds per test case run
    timer: str = "wall"  # or "instructions" (callgrind: deterministic counts)
    rounds: int = 5  # timed rounds at least, each running every test case once per side
    budget: int | None = None
    min_speedup: float | None = None
    #: pytest paths or node ids, relative to the root, re-run against a copy of the project
    #: that holds the rewrite: a program's test cases may not be all its users rely on
    tests: tuple[str, ...] = ()


def parse_programs(raw: Any, root: Path) -> list[ProgramTarget]:
    """``[tool.maxcode.programs]`` as targets; ValueError with one line naming the key to fix."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ValueError("programs must be a table: [tool.maxcode.programs.NAME] with source and testcases")
    out = []
    for name, table in raw.items():
        where = f"[tool.maxcode.programs.{name}]"
        if not PROGRAM_NAME.fullmatch(name):
            raise ValueError(f"{where}: a program's name may use letters, digits, '_', '.' and '-' only")
        if not isinstance(table, dict):
            raise ValueError(f"{where}: must be a table with source and testcases")
        unknown = sorted(set(table) - set(PROGRAM_KEYS))
        if unknown:
            raise ValueError(f"{where}: no setting {unknown[0]!r} (known: {', '.join(PROGRAM_KEYS)})")
        out.append(_program(name, table, root, where))
    return out


def _program(name: str, t: dict[str, Any], root: Path, where: str) -> ProgramTarget:
    for key in ("source", "testcases"):
        if not isinstance(t.get(key), str) or not t[key]:
            raise ValueError(f"{where}: set {key} = \"PATH\" (relative to {root})")
    source, tests = Path(t["source"]), Path(t["testcases"])
    if source.is_absolute() or tests.is_absolute():
        raise ValueError(f"{where}: source and testcases are paths relative to the project root, not absolute")
    if source.suffix.lower() not in SOURCE_SUFFIXES:
        raise ValueError(f"{where}: source {source} is not a C++ file ({', '.join(SOURCE_SUFFIXES)})")
    if not (root / source).is_file():
        raise ValueError(f"{where}: source {source}: no such file under {root}")
    if not (root / tests).is_dir():
        raise ValueError(f"{where}: testcases {tests}: no such folder under {root}")
    flags = t.get("cxxflags", DEFAULT_CXXFLAGS)
    try:
        cxxflags = tuple(shlex.split(flags)) if isinstance(flags, str) else None
    except ValueError:
        cxxflags = None
    if cxxflags is None:
        raise ValueError(f"{where}: cxxflags must be one string of g++ flags, such as {DEFAULT_CXXFLAGS!r}")
    timer = t.get("timer", "wall")
    if timer not in ("wall", "instructions"):
        raise ValueError(f"{where}: timer must be \"wall\" or \"instructions\", not {timer!r}")
    return ProgramTarget(
        name, source, tests, cxxflags,
        timeout=_program_number(t, "timeout", 10.0, where), timer=timer, rounds=_program_count(t, "rounds", 5, where),
        budget=_program_count(t, "budget", None, where), min_speedup=_program_number(t, "min_speedup", None, where),
        tests=_program_tests(t.get("tests", []), root, where, name),
    )


def _program_tests(v: Any, root: Path, where: str, name: str) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f'{where}: tests must be a list of pytest paths or node ids, such as ["tests/test_{name}.py"]')
    for item in items:
        path = Path(item.split("::", 1)[0])
        if path.is_absolute() or not (root / path).exists():
            raise ValueError(f"{where}: tests: {path}: no such file or folder under {root}")
    return tuple(items)


def _program_number(t: dict[str, Any], key: str, default: float | None, where: str) -> Any:
    v = t.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
        raise ValueError(f"{where}: {key} must be a number greater than 0, not {v!r}")
    return None if v is None else float(v)


def _program_count(t: dict[str, Any], key: str, default: int | None, where: str) -> Any:
    v = t.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"{where}: {key} must be a positive integer, not {v!r}")
    return v


# -- the regression gate ([tool.maxcode.regressions]) ---------------------------------------------

#: a slowdown beyond this fraction may be a regression, unless a table says otherwise
DEFAULT_THRESHOLD = 0.10
#: ``bench-ab``'s processes per side: on a shared 2-core VM beside a hog one process's figure
#: differs from the next by about 0.11 (sd of the log, with tails to +50%); with seven a side the
#: rank test beyond the threshold called identical code slower about once in 1,000 comparisons
#: (five: about 2 in 1,000), and a 2x slowdown every time
DEFAULT_RUNS = 7


@dataclass(frozen=True)
class Regressions:
    """``threshold``, per-benchmark ``thresholds`` (globs), and how ``maxcode bench-ab`` measures:
    ``timer`` (``time``, or ``instructions`` under valgrind), ``runs`` per side, and whether
    each timed run is forked from a server per side (``fork_server``) or a new interpreter."""

    threshold: float = DEFAULT_THRESHOLD
    thresholds: Mapping[str, float] | None = None
    timer: str = "time"
    runs: int = DEFAULT_RUNS
    fork_server: bool = True


def parse_regressions(table: Regressions | Mapping[str, Any] | None) -> Regressions:
    """``[tool.maxcode.regressions]``, or ValueError naming the bad key. A ``Regressions`` is
    returned as it is."""
    if isinstance(table, Regressions):
        return table
    table = dict(table or {})
    known = ("threshold", "thresholds", "timer", "runs", "fork_server")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"[tool.maxcode.regressions] has no setting {unknown[0]!r} (known: {', '.join(known)})")
    default = table.get("threshold", DEFAULT_THRESHOLD)
    per = table.get("thresholds") or {}
    if not isinstance(per, Mapping):
        raise ValueError("[tool.maxcode.regressions] thresholds must be a table of glob = fraction")
    for key, value in [("threshold", default), *((f"thresholds.{k!r}", v) for k, v in per.items())]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10:
            raise ValueError(f"[tool.maxcode.regressions] {key} must be a fraction such as 0.1 (10%), not {value!r}")
    timer = table.get("timer", "time")
    if timer not in ("time", "instructions"):
        raise ValueError(f"[tool.maxcode.regressions] timer must be \"time\" or \"instructions\", not {timer!r}")
    runs = table.get("runs", DEFAULT_RUNS)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"[tool.maxcode.regressions] runs must be a whole number of at least 2, not {runs!r}")
    fork_server = table.get("fork_server", True)
    if not isinstance(fork_server, bool):
        raise ValueError(f"[tool.maxcode.regressions] fork_server must be true or false, not {fork_server!r}")
    return Regressions(float(default), {str(k): float(v) for k, v in per.items()}, timer, runs, fork_server)


# -- LLM prices (the ``prices`` setting) -----------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float  # not cached
    output: float
    cache_write: float
    cache_read: float


def parse_price(name: str, spec: Any) -> Price:
    """One model's entry of the ``prices`` table, or ValueError saying how to fix it. A ``Price``
    is returned as it is."""
    if isinstance(spec, Price):
        return spec
    where = f"prices for {name!r}"
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where} must be a table like {{input = 3, output = 15}} (USD per million tokens): fix the prices setting")
    unknown = set(spec) - {"input", "output", "cache_write", "cache_read"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (use input, output, cache_write, cache_read): fix the prices setting")
    vals: dict[str, float] = {}
    for k, v in spec.items():
        try:
            vals[k] = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {k} = {v!r} is not a number of USD per million tokens: fix the prices setting") from None
        if vals[k] < 0:
            raise ValueError(f"{where}: {k} must not be negative: fix the prices setting")
    if "input" not in vals or "output" not in vals:
        raise ValueError(f"{where} needs at least input and output (USD per million tokens): fix the prices setting")
    inp = vals["input"]
    claude = name.startswith("claude")
    return Price(inp, vals["output"], vals.get("cache_write", inp * 1.25 if claude else inp), vals.get("cache_read", inp * 0.1))


def parse_prices(table: Mapping[str, Any]) -> dict[str, Price]:
    """The ``prices`` setting, model name to ``Price``; parsed entries are kept as they are."""
    if not isinstance(table, Mapping):
        raise ValueError("prices must be a table of model = {input = ..., output = ...}")
    return {str(name): parse_price(str(name), spec) for name, spec in table.items()}
