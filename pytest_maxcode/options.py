"""Every setting, defined once, for every front end: the pytest plugin, ``maxcode`` and
``[tool.maxcode]`` in pyproject.toml.

pytest-benchmark's way: one table, several renderings. The table is the ``Settings`` class:
each field holds its type, its default and, in ``setting(...)``, its help, its parser and where
it may be given. ``pytest`` spells an option ``--maxcode-NAME``; the ``maxcode`` command spells
it ``--NAME``; pyproject.toml names it ``NAME`` in ``[tool.maxcode]`` or in a named profile,
``[tool.maxcode.profiles.NAME]``, as Hypothesis's settings profiles do.

``load_settings`` resolves one run's settings once (the device included): the command line over
the selected profile over ``[tool.maxcode]`` over the defaults; the settings that are tables are
parsed then, once, into ``tables``' frozen types. The bottom layer: it imports only ``tables``
(the parsers and types of the settings that are tables) at module level.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .tables import (
    Price,
    ProgramTarget,
    Regressions,
    Schedule,
    parse_observation,
    parse_prices,
    parse_programs,
    parse_regressions,
    parse_schedule,
)


def parse_size(text: str) -> int:
    """'512M', '4G', '1.5GiB', '1000000' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (try 512M or 4G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return v


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return v


def non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return v


#: what each parser accepts, in the words of a one-line error
ACCEPTS: dict[Any, str] = {
    positive_float: "a number greater than 0",
    non_negative_float: "a number, 0 or more",
    positive_int: "an integer, 1 or more",
    non_negative_int: "an integer, 0 or more",
    int: "an integer",
    float: "a number",
    parse_size: "a size such as 512M or 4G",
}

#: where a setting may be given: ``maxcode check``, ``pytest --maxcode``, pyproject.toml
CHECK, PYTEST, FILE = "check", "pytest", "file"


@dataclass(frozen=True)
class Option:
    """One setting's rendering: its flag, its parser, where it may be given."""

    name: str  # the field's name, e.g. "min_speedup"
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None  # the parser of its text (None: free text, a flag or a table)
    choices: tuple[str, ...] | None = None
    action: str | None = None  # "store_true" (a flag) or "append" (repeatable)
    metavar: str | None = None
    scopes: frozenset[str] = frozenset({CHECK})
    spelled: str | None = None  # the flag's and the key's name where it differs from the field's
    kind: str = "value"  # "value", "table" (a TOML table), "globs" (a glob or a list), "range" (true, false or globs)

    @property
    def key(self) -> str:
        """Its name in pyproject.toml."""
        return self.spelled or self.name

    def flag(self, prefix: str = "") -> str:
        return f"--{prefix}{self.key.replace('_', '-')}"

    def kwargs(self) -> dict[str, Any]:
        """argparse's arguments. The default is always None: an option not given leaves the
        profile's, the file's or the table's value in place."""
        kw: dict[str, Any] = {"help": self.help, "dest": self.name, "default": None}
        if self.action:
            kw["action"] = self.action
        if self.action != "store_true":
            if self.type is not None:
                kw["type"] = self.type
            if self.choices:
                kw["choices"] = self.choices
            if self.metavar:
                kw["metavar"] = self.metavar
        return kw


def setting(default: Any, help: str, *, type: Callable[[str], Any] | None = None, choices: tuple[str, ...] | None = None,
            action: str | None = None, metavar: str | None = None, scopes: tuple[str, ...] = (PYTEST, FILE),
            spelled: str | None = None, kind: str = "value") -> Any:
    """A field of ``Settings`` and its option, defined together. ``{default}`` in the help is
    the field's default, so a default is written once.

    Parameters because each one is a column of the options table (name, type, default, parser, front
    ends, help): a call reads as that table's row.
    """
    meta = {"help": help, "type": type, "choices": choices, "action": action, "metavar": metavar,
            "scopes": frozenset(scopes), "spelled": spelled, "kind": kind}
    return field(default=default, metadata={"option": meta})


_C, _CP, _CPF, _F = (CHECK,), (CHECK, PYTEST), (CHECK, PYTEST, FILE), (FILE,)


@dataclass(frozen=True)
class Settings:
    """One run's settings, resolved once (``load_settings``) and read as attributes everywhere.

    The one options table: every field is a setting, with its type, default, parser and the
    places it may be given. After ``load_settings``, ``device`` is ``cpu`` or ``cuda``."""

    # -- the checks (maxcode check, and the oracle of every search) ------------------------------
    sandbox: str = setting("auto", "the OS sandbox every process that runs candidate code (workers, compilers, programs) runs in: auto (the strongest available: bwrap, else unshare, else none with a warning), bwrap, unshare, or none (no isolation; flagged in every verdict, report and pull request) (default {default})",
                           choices=("auto", "bwrap", "unshare", "none"), scopes=_CPF)
    device: str = setting("auto", "where candidates run: cpu or cuda (default: cuda for a target declared lang='cuda' and for .cu candidates of maxcode check when a GPU is present, else cpu)",
                          choices=("cpu", "cuda"), scopes=_CPF)
    atol: float | None = setting(None, "absolute tolerance (default by dtype: fp32 1e-4, fp16/bf16 1e-2, integers exact)", type=non_negative_float, metavar="F", scopes=_C)
    rtol: float | None = setting(None, "relative tolerance (default by dtype, as --atol)", type=non_negative_float, metavar="F", scopes=_C)
    min_speedup: float = setting(1.05, "a candidate is 'faster' only when the low end of its 95%% interval clears this (default {default})", type=positive_float, metavar="F", scopes=_CPF)
    timeout: float = setting(60.0, "seconds one candidate may take to be checked and timed, builds excluded (default {default:g})", type=positive_float, metavar="S", scopes=_C)
    build_timeout: float = setting(300.0, "seconds one build may take (default {default:g})", type=positive_float, metavar="S", scopes=_C)
    max_memory: int = setting(4 << 30, "memory a candidate may allocate beyond the harness's own, e.g. 512M or 4G (default 4G)", type=parse_size, metavar="SIZE", scopes=_C)
    seed: int | None = setting(None, "seed of this run's generated and range-widened input sets and of a module's initialisation (default: a random one, recorded in every verdict; pass it to reproduce them); the timed calls' inputs are drawn afresh whatever the seed, so that no candidate can predict them", type=int, metavar="N", scopes=_CP)
    seeds: int = setting(3, "number of random input sets (default {default}, at least 2)", type=int, metavar="N", scopes=_C)
    time_budget: float = setting(0.5, "seconds of interleaved timing per candidate and workload (default {default}; less makes a search quicker and its intervals wider)", type=positive_float, metavar="S", scopes=_CPF)
    timer: str = setting("time", "wall time, or callgrind instruction counts of single-threaded runs for native C++ candidates (deterministic on noisy machines; about a minute of start-up under valgrind)", choices=("time", "instructions"), scopes=_C)
    cxxflags: str | None = setting(None, "g++ flags replacing the defaults (-O3 -march=native -fopenmp -fno-trapping-math -std=c++17), one string", metavar="FLAGS", scopes=_C)
    nvccflags: str | None = setting(None, "nvcc flags replacing the defaults (-O3 -std=c++17), one string; -arch is added", metavar="FLAGS", scopes=_C)
    jobs: int | None = setting(None, "parallel builds (default: one per core)", type=int, metavar="N", scopes=_C)
    json: bool = setting(False, "print one JSON array on stdout, one object per candidate", action="store_true", scopes=_C)
    inplace: bool = setting(False, "the reference writes its result into its tensor arguments; they are what is compared", action="store_true", scopes=_C)
    profile: str | None = setting(None, "apply the settings of [tool.maxcode.profiles.NAME] in pyproject.toml over [tool.maxcode]; the command line still wins (maxcode check reads pyproject.toml only with --profile)", metavar="NAME", scopes=_CP)

    # -- the search (pytest --maxcode) ---------------------------------------------------------
    target: tuple[str, ...] = setting((), "optimize only targets whose id matches this glob (e.g. 'mylib.*'; repeatable)", action="append", metavar="PATTERN", kind="globs")
    budget: int = setting(8, "candidates evaluated per target (default {default})", type=positive_int, metavar="N")
    time: float | None = setting(None, "seconds of search per target (default: no limit)", type=positive_float, metavar="SECONDS")
    policy: str | None = setting(None, "where candidates come from: 'llm' (the model of --maxcode-llm) or 'builtin' (torch.compile variants and seeds under maxcode_kernels/seeds/); plugins add more (default: llm when a model is configured, else builtin)", metavar="NAME")
    llm: str | None = setting(None, "the model: anthropic[:MODEL[@URL]], openai:MODEL[@URL] (vLLM, Ollama, llama.cpp, OpenAI), replay:CASSETTE.jsonl (default: anthropic when ANTHROPIC_API_KEY is set)", metavar="SPEC")
    record: str | None = setting(None, "record every LLM request and reply of this run to a cassette (replay it with --maxcode-llm=replay:PATH)", metavar="PATH")
    strategy: str | None = setting(None, "search method: sweep, best-of-n, refine, effi, maxcode, beam, qd (quality-diversity, staged by [tool.maxcode.qd]); plugins add more (default: maxcode with an LLM, sweep without)", metavar="NAME")
    observation: str = setting("trajectory+best", "what of the search the prompt shows: feedback, trajectory, best, critique, joined with + (default {default})", metavar="PARTS")
    format: str = setting("native", "what the LLM writes: native (.cpp/.cu maxcode_run, default) or compat (a Python file)", choices=("native", "compat"))
    k: int = setting(4, "proposals per search step (default {default})", type=positive_int, metavar="N")
    depth: int | None = setting(None, "search steps (default: until a budget ends the search)", type=positive_int, metavar="N")
    width: int = setting(2, "beam width of --maxcode-strategy=beam (default {default})", type=positive_int, metavar="N")
    rerank: str = setting("none", "maxcode strategy: score its k proposals by predicted reward-to-go and send the top m: none, light (the model of maxcode value train) or llm (a generative scorer, --maxcode-rerank-llm) (default {default})", choices=("none", "light", "llm"))
    rerank_llm: str | None = setting(None, "the scorer of --maxcode-rerank=llm, spelled like --maxcode-llm: typically openai:MODEL@URL, a model tuned on maxcode value export (default: the proposer's model)", metavar="SPEC")
    rerank_top: int | None = setting(None, "how many reranked proposals go to the oracle per step (default: half of k, at least 1)", type=positive_int, metavar="M")
    llm_calls: int | None = setting(None, "LLM requests per target (default: no limit)", type=positive_int, metavar="N")
    tokens: int | None = setting(None, "LLM tokens (input + output) per target (default: no limit)", type=positive_int, metavar="N")
    cost: float | None = setting(None, "US dollars of LLM use per target (default: no limit)", type=positive_float, metavar="USD")
    run_budget: int | None = setting(None, "candidates evaluated in the whole run (default: no limit)", type=positive_int, metavar="N")
    run_time: float | None = setting(None, "seconds of search in the whole run (default: no limit)", type=positive_float, metavar="SECONDS")
    run_llm_calls: int | None = setting(None, "LLM requests in the whole run (default: no limit)", type=positive_int, metavar="N")
    run_tokens: int | None = setting(None, "LLM tokens in the whole run (default: no limit)", type=positive_int, metavar="N")
    run_cost: float | None = setting(None, "US dollars of LLM use in the whole run (default: no limit)", type=positive_float, metavar="USD")
    llm_concurrency: int = setting(4, "LLM requests in flight at once (default {default})", type=positive_int, metavar="N")
    llm_timeout: float = setting(600.0, "seconds one LLM request may take (default {default:g})", type=positive_float, metavar="SECONDS")
    llm_retries: int = setting(2, "retries of a rate-limited (429) or failed (5xx) LLM request, by the SDK with backoff (default {default})", type=non_negative_int, metavar="N")
    thinking_tokens: int = setting(0, "extended-thinking budget per request, Anthropic models (default 0: off)", type=non_negative_int, metavar="N")
    search_seed: int = setting(0, "seed of the search: runs with different seeds ask the model for different samples (distinct cache keys) and draw qd parents differently (default {default})", type=non_negative_int, metavar="N")
    critic: str = setting("rules", "who critiques each evaluated candidate: rules (no LLM, the default), llm (the proposer's model), or a model of its own, spelled like --maxcode-llm (e.g. anthropic:claude-opus-4-1)", metavar="CRITIC")
    critic_thinking_tokens: int = setting(0, "extended-thinking budget of the LLM critic's requests (default 0: off)", type=non_negative_int, metavar="N")
    parallel_targets: int = setting(1, "targets searched at once: their LLM requests overlap, oracle work takes turns (default {default})", type=positive_int, metavar="N")
    json_path: str | None = setting(None, "also write the JSON report here (it always lands in .maxcode/reports/)", metavar="PATH", spelled="json")
    remeasure: bool = setting(False, "time stored candidates again instead of reusing their stored verdicts (a stored verdict too noisy to decide is re-timed anyway)", action="store_true")
    apply: bool = setting(False, "write each verified best kernel to maxcode_kernels/ and maxcode.lock", action="store_true")
    executor: str = setting("local", "where builds, checks and timings run: local (this machine) or ray (a pool of Ray actors, one per GPU, or one per node on CPU; pip install 'pytest-maxcode[ray]') (default {default})", choices=("local", "ray"))
    ray_address: str | None = setting(None, "the Ray cluster of --maxcode-executor=ray, e.g. HOST:6379 or ray://HOST:10001 (default: RAY_ADDRESS, else a local Ray instance started here)", metavar="ADDRESS")
    ray_actors: int | None = setting(None, "with --maxcode-executor=ray: checking actors, each timing alone on its GPU or node (default: one per GPU with --device cuda, else one per node; more per node time in each other's noise)", type=positive_int, metavar="N")

    # -- pyproject.toml only ---------------------------------------------------------------------
    torch_compile: bool = setting(True, "the built-in policy's `torch.compile` variants of the reference", action="store_true", scopes=_F)
    llm_cache: bool = setting(True, "answer a repeated LLM request from the store (it then costs nothing)", action="store_true", scopes=_F)
    max_tokens: int = setting(8192, "the reply's token limit, per LLM request", type=positive_int, scopes=_F)
    temperature: float = setting(1.0, "sampling temperature, per LLM request", type=non_negative_float, scopes=_F)
    prices: Mapping[str, Price] | None = setting(None, "USD per million tokens, per model: input, output, cache_write, cache_read", kind="table", scopes=_F)
    qd: Schedule | None = setting(None, "the qd strategy's staged schedule: stages = [...], and per-glob targets", kind="table", scopes=_F)
    regressions: Regressions | None = setting(None, "maxcode compare: threshold = 0.1, and per-glob thresholds", kind="table", scopes=_F)
    programs: tuple[ProgramTarget, ...] | None = setting(None, "C++ program targets, one table each: source, testcases, ...", kind="table", scopes=_F)
    accept_range_limited: bool | tuple[str, ...] = setting(False, "true, or target-id globs: see accepts_range_limited", kind="range", scopes=_F)

    def __post_init__(self) -> None:
        """The tables typed however this was built: a raw table (a test's, a caller's) is parsed
        here, a parsed one kept; ValueError as the table's parser words it. Program targets are
        checked against the project root, which only ``load_settings`` knows: a raw table is refused."""
        for name, parse in (("prices", parse_prices), ("qd", parse_schedule), ("regressions", parse_regressions)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, parse(value))
        if self.programs is not None:
            programs = tuple(self.programs) if isinstance(self.programs, (list, tuple)) else None
            if programs is None or not all(isinstance(p, ProgramTarget) for p in programs):
                raise TypeError("programs: pass ProgramTargets; a [tool.maxcode.programs] table is parsed against its "
                                "project root by load_settings (or tables.parse_programs(table, root))")
            object.__setattr__(self, "programs", programs)

    def device_for(self, lang: str) -> str:
        """Where a target's candidates run: CUDA for a target declared ``lang='cuda'``, else the run's device."""
        return "cuda" if lang == "cuda" else self.device

    def rerank_count(self) -> int:
        """How many reranked proposals go to the oracle per step."""
        return self.rerank_top if self.rerank_top is not None else max(1, self.k // 2)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (not checked, but for a raw table, which is parsed:
        ``load_settings`` checks what users give)."""
        return dataclasses.replace(self, **changes)


#: every setting's option, in the table's order
TABLE: tuple[Option, ...] = tuple(
    Option(f.name, default=f.default, **{**f.metadata["option"], "help": f.metadata["option"]["help"].format(default=f.default)})
    for f in dataclasses.fields(Settings)
)
_BY_NAME: dict[str, Option] = {o.name: o for o in TABLE}
#: the options with a command-line spelling
OPTIONS: tuple[Option, ...] = tuple(o for o in TABLE if o.scopes & {CHECK, PYTEST})
#: [tool.maxcode] keys (field names), and the defaults that apply when nothing sets one
SETTINGS_DEFAULTS: dict[str, Any] = {o.name: o.default for o in TABLE if FILE in o.scopes}
#: the one default of min_speedup, for readers without a Settings (a report, a program target)
MIN_SPEEDUP: float = _BY_NAME["min_speedup"].default


def for_scope(scope: str) -> list[Option]:
    return [o for o in TABLE if scope in o.scopes]


def add_to_argparse(parser: argparse.ArgumentParser, scope: str) -> None:
    for opt in for_scope(scope):
        parser.add_argument(opt.flag(), **opt.kwargs())


def add_to_pytest(group: Any) -> None:
    group.addoption("--maxcode", action="store_true", default=False, help="optimize the targets marked with @maxcode.optimize")
    for opt in for_scope(PYTEST):
        kw = opt.kwargs()
        kw["dest"] = f"maxcode_{opt.name}"
        group.addoption(opt.flag("maxcode-"), **kw)


def _toml(value: Any) -> str:
    """A value as it was written in pyproject.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{...}"
    return repr(value)


#: the type each table setting is parsed into, besides a mapping (``prices``' own type)
_PARSED_TABLES: dict[str, type] = {"qd": Schedule, "regressions": Regressions, "programs": tuple}


def file_value(name: str, value: Any) -> Any:
    """One value as pyproject.toml (or a caller) gives it, checked and converted by the parser
    its command-line option uses; raises ValueError(what is accepted) for a bad one."""
    opt = _BY_NAME[name]
    if opt.action == "store_true":
        if not isinstance(value, bool):
            raise ValueError("expected true or false (a TOML boolean, unquoted)")
        return value
    if opt.kind == "table":  # a table as written, or (from a caller) already parsed
        if not isinstance(value, (Mapping, _PARSED_TABLES.get(name, Mapping))):
            raise ValueError(f"expected a table ([tool.maxcode.{name}])")
        return value
    if opt.kind == "range":
        if isinstance(value, bool):
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        raise ValueError("expected true, false, or a list of target-id globs, e.g. [\"mylib.*\"]")
    if opt.kind == "globs":
        if isinstance(value, str):
            return (value,)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError("expected a glob or a list of globs, e.g. \"mylib.*\"")
    if opt.choices:
        if not isinstance(value, str) or value not in opt.choices:
            raise ValueError(f"expected one of {', '.join(opt.choices)}")
        return value
    if opt.type is None:  # free text: a name, a spec, a path
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a string{f' ({opt.metavar})' if opt.metavar else ''}")
        if name == "observation":
            parse_observation(value)
        return value
    accepts = ACCEPTS.get(opt.type, "a value its command-line option accepts")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected {accepts}")
    if opt.type in (int, positive_int, non_negative_int) and isinstance(value, float):
        raise ValueError(f"expected {accepts}")
    try:
        return opt.type(str(value))
    except (argparse.ArgumentTypeError, ValueError):
        raise ValueError(f"expected {accepts}") from None


def _given(name: str, value: Any) -> Any:
    """A value a front end passes (already parsed by argparse, or set by a caller), checked
    like a file's: ValueError 'NAME must be WHAT, not VALUE'."""
    opt = _BY_NAME.get(name)
    if opt is None:
        raise ValueError(f"no setting {name!r}")
    if opt.type is None and not opt.choices and opt.kind == "value" and isinstance(value, str):
        if name == "observation":
            parse_observation(value)
        return value  # free text as typed (an empty --cxxflags is no flags)
    try:
        return file_value(name, value)
    except ValueError as e:
        what = " or ".join((", ".join(opt.choices[:-1]), opt.choices[-1])) if opt.choices else str(e).removeprefix("expected ")
        raise ValueError(f"{name.replace('_', '-')} must be {what}, not {value!r}") from None


def _layer(raw: Any, where: str, pyproject: Path) -> dict[str, Any]:
    """One table of pyproject.toml (``[tool.maxcode]`` or a profile) as checked values."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{pyproject}: {where} must be a table")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        spelled = key.replace("-", "_")
        name = next((o.name for o in TABLE if spelled in (o.key, o.name) and FILE in o.scopes), None)
        if name is None:
            known = ", ".join(sorted(_BY_NAME[k].key for k in SETTINGS_DEFAULTS))
            raise ValueError(f"{pyproject}: {where} has no setting {key!r} (known: {known})")
        try:
            out[name] = file_value(name, value)
        except ValueError as e:
            raise ValueError(f"{pyproject}: {where} {key} = {_toml(value)}: {e}") from None
    return out


def _file_layers(pyproject: Path | None, profile: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``[tool.maxcode]`` and the selected profile, each checked. Every profile is checked, the
    selected one or not, so a mistake in CI's profile shows on a laptop too."""
    if pyproject is None or not pyproject.is_file():
        if profile is not None:
            raise ValueError(f"profile {profile!r}: there is no pyproject.toml{f' at {pyproject}' if pyproject else ''} "
                             f"to hold [tool.maxcode.profiles.{profile}]")
        return {}, {}
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{pyproject}: {e}") from None
    raw = dict(data.get("tool", {}).get("maxcode", {}))
    profiles = raw.pop("profiles", {})
    if not isinstance(profiles, Mapping) or not all(isinstance(p, Mapping) for p in profiles.values()):
        raise ValueError(f"{pyproject}: [tool.maxcode] profiles: expected tables, one per profile ([tool.maxcode.profiles.NAME])")
    base = _layer(raw, "[tool.maxcode]", pyproject)
    checked = {name: _layer(table, f"[tool.maxcode.profiles.{name}]", pyproject) for name, table in profiles.items()}
    if profile is not None and profile not in checked:
        known = ", ".join(sorted(checked)) or "none"
        raise ValueError(f"{pyproject}: no profile {profile!r} (profiles: {known}); add [tool.maxcode.profiles.{profile}]")
    return base, checked.get(profile, {}) if profile is not None else {}


def _parse_tables(merged: dict[str, Any], pyproject: Path | None) -> None:
    """The tables of ``merged`` parsed in place, once, by their own parsers, their errors one
    line; program targets against the project root, the folder of ``pyproject``."""
    try:
        for name, parse in (("prices", parse_prices), ("regressions", parse_regressions)):
            if merged.get(name) is not None:
                merged[name] = parse(merged[name])
    except ValueError as e:
        raise ValueError(f"{pyproject}: {e}" if pyproject is not None else str(e)) from None
    if merged.get("qd") is not None:
        merged["qd"] = parse_schedule(merged["qd"])
    if isinstance(merged.get("programs"), Mapping):
        if pyproject is None:
            raise ValueError("programs: a [tool.maxcode.programs] table's paths are relative to the project root: "
                             "give load_settings the project's pyproject.toml")
        merged["programs"] = tuple(parse_programs(merged["programs"], pyproject.parent))


def load_settings(cli: Mapping[str, Any], pyproject: Path | None, *, auto_device: str = "cpu") -> Settings:
    """One run's settings: the command line over the profile it names (``profile``) over
    ``[tool.maxcode]`` over the table's defaults, each value checked by its option's parser
    (ValueError: one line naming the key, the value and what is accepted). ``auto_device`` is
    what an unset device resolves to (``maxcode check`` with a .cu candidate and a GPU: cuda)."""
    given = {name: _given(name, value) for name, value in cli.items() if value is not None}
    base, chosen = _file_layers(pyproject, given.get("profile"))
    merged: dict[str, Any] = {**base, **chosen, **given}
    if merged.get("device", "auto") == "auto":
        merged["device"] = auto_device
    _parse_tables(merged, pyproject)
    return Settings(**merged)


def accepts_range_limited(target_id: str, declared: bool | None, setting: bool | tuple[str, ...] | list[str] | None) -> bool:
    """Whether a target's range-limited result (correct on the captured range, wrong on a wider
    one or on special values) may still be applied and proposed. The one rule for it: the
    target's own ``@maxcode.optimize(accept_range_limited=...)`` when given, else
    ``[tool.maxcode] accept_range_limited``: ``true``, ``false``, or globs of target ids
    (the only way to set it for a C++ program target)."""
    if declared is not None:
        return bool(declared)
    if isinstance(setting, (list, tuple)):
        return any(fnmatchcase(target_id, pattern) for pattern in setting)
    return bool(setting)
