"""Every option, defined once, for both front ends (the pytest plugin and ``maxcode``).

pytest-benchmark's way: one table, two renderings. ``pytest`` spells an option
``--maxcode-NAME``; the ``maxcode`` command spells it ``--NAME``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


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


@dataclass(frozen=True)
class Option:
    name: str  # the attribute name, e.g. "min_speedup"
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    metavar: str | None = None
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"check"}))
    spelled: str | None = None  # the flag's name where it differs from the attribute's

    def flag(self, prefix: str = "") -> str:
        return f"--{prefix}{(self.spelled or self.name).replace('_', '-')}"

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"help": self.help, "dest": self.name, "default": self.default}
        if self.action:
            kw["action"] = self.action
        else:
            if self.type is not None:
                kw["type"] = self.type
            if self.choices:
                kw["choices"] = self.choices
            if self.metavar:
                kw["metavar"] = self.metavar
        return kw


PYTEST = frozenset({"pytest"})
BOTH = frozenset({"check", "pytest"})

OPTIONS: tuple[Option, ...] = (
    Option("sandbox", "the OS sandbox every process that runs candidate code (workers, compilers, programs) runs in: auto (the strongest available: bwrap, else unshare, else none with a warning), bwrap, unshare, or none (no isolation; flagged in every verdict, report and pull request) (default auto)", choices=("auto", "bwrap", "unshare", "none"), default=None, scopes=BOTH),
    Option("device", "where candidates run: cpu or cuda (default: cuda for .cu candidates when a GPU is present, else cpu)", choices=("cpu", "cuda"), scopes=BOTH),
    Option("atol", "absolute tolerance (default by dtype: fp32 1e-4, fp16/bf16 1e-2, integers exact)", type=non_negative_float, metavar="F"),
    Option("rtol", "relative tolerance (default by dtype, as --atol)", type=non_negative_float, metavar="F"),
    Option("min_speedup", "a candidate is 'faster' only when the low end of its 95%% interval clears this (default 1.05)", type=positive_float, default=None, metavar="F", scopes=BOTH),
    Option("timeout", "seconds one candidate may take to be checked and timed, builds excluded (default 60)", type=positive_float, default=60.0, metavar="S"),
    Option("build_timeout", "seconds one build may take (default 300)", type=positive_float, default=300.0, metavar="S"),
    Option("max_memory", "memory a candidate may allocate beyond the harness's own, e.g. 512M or 4G (default 4G)", type=parse_size, default=4 << 30, metavar="SIZE"),
    Option("seed", "seed of this run's generated input sets and fresh timed inputs (default: a random one, recorded in every verdict; pass it to reproduce a run's inputs)", type=int, default=None, metavar="N", scopes=BOTH),
    Option("seeds", "number of random input sets (default 3, at least 2)", type=int, default=3, metavar="N"),
    Option("time_budget", "seconds of interleaved timing per candidate and workload (default 0.5)", type=positive_float, default=0.5, metavar="S"),
    Option("timer", "wall time, or callgrind instruction counts of single-threaded runs for native C++ candidates (deterministic on noisy machines; about a minute of start-up under valgrind)", choices=("time", "instructions"), default="time"),
    Option("cxxflags", "g++ flags replacing the defaults (-O3 -march=native -fopenmp -std=c++17), one string", metavar="FLAGS"),
    Option("nvccflags", "nvcc flags replacing the defaults (-O3 -std=c++17), one string; -arch is added", metavar="FLAGS"),
    Option("jobs", "parallel builds (default: one per core)", type=int, metavar="N"),
    Option("json", "print one JSON array on stdout, one object per candidate", action="store_true", default=False),
    Option("inplace", "the reference writes its result into its tensor arguments; they are what is compared", action="store_true", default=False),
    Option("target", "optimize only targets whose id matches this glob (e.g. 'mylib.*'; repeatable)", action="append", metavar="PATTERN", scopes=PYTEST),
    Option("budget", "candidates evaluated per target (default 8)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("time", "seconds of search per target (default: no limit)", type=positive_float, default=None, metavar="SECONDS", scopes=PYTEST),
    Option("policy", "where candidates come from: 'llm' (the model of --maxcode-llm) or 'builtin' (torch.compile variants and seeds under maxcode_kernels/seeds/); plugins add more (default: llm when a model is configured, else builtin)", default=None, metavar="NAME", scopes=PYTEST),
    Option("llm", "the model: anthropic[:MODEL[@URL]], openai:MODEL[@URL] (vLLM, Ollama, llama.cpp, OpenAI), replay:CASSETTE.jsonl (default: anthropic when ANTHROPIC_API_KEY is set)", default=None, metavar="SPEC", scopes=PYTEST),
    Option("record", "record every LLM request and reply of this run to a cassette (replay it with --maxcode-llm=replay:PATH)", default=None, metavar="PATH", scopes=PYTEST),
    Option("strategy", "search method: sweep, best-of-n, refine, effi, maxcode, beam, qd (quality-diversity, staged by [tool.maxcode.qd]); plugins add more (default: maxcode with an LLM, sweep without)", default=None, metavar="NAME", scopes=PYTEST),
    Option("observation", "what of the search the prompt shows: feedback, trajectory, best, critique, joined with + (default trajectory+best)", default=None, metavar="PARTS", scopes=PYTEST),
    Option("format", "what the LLM writes: native (.cpp/.cu maxcode_run, default) or compat (a Python file)", choices=("native", "compat"), default=None, scopes=PYTEST),
    Option("k", "proposals per search step (default 4)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("depth", "search steps (default: until a budget ends the search)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("width", "beam width of --maxcode-strategy=beam (default 2)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("rerank", "maxcode strategy: score its k proposals by predicted reward-to-go and send the top m: none, light (the model of maxcode value train) or llm (a generative scorer, --maxcode-rerank-llm) (default none)", choices=("none", "light", "llm"), default=None, scopes=PYTEST),
    Option("rerank_llm", "the scorer of --maxcode-rerank=llm, spelled like --maxcode-llm: typically openai:MODEL@URL, a model tuned on maxcode value export (default: the proposer's model)", default=None, metavar="SPEC", scopes=PYTEST),
    Option("rerank_top", "how many reranked proposals go to the oracle per step (default: half of k, at least 1)", type=int, default=None, metavar="M", scopes=PYTEST),
    Option("llm_calls", "LLM requests per target (default: no limit)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("tokens", "LLM tokens (input + output) per target (default: no limit)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("cost", "US dollars of LLM use per target (default: no limit)", type=positive_float, default=None, metavar="USD", scopes=PYTEST),
    Option("run_budget", "candidates evaluated in the whole run (default: no limit)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("run_time", "seconds of search in the whole run (default: no limit)", type=positive_float, default=None, metavar="SECONDS", scopes=PYTEST),
    Option("run_llm_calls", "LLM requests in the whole run (default: no limit)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("run_tokens", "LLM tokens in the whole run (default: no limit)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("run_cost", "US dollars of LLM use in the whole run (default: no limit)", type=positive_float, default=None, metavar="USD", scopes=PYTEST),
    Option("llm_concurrency", "LLM requests in flight at once (default 4)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("llm_timeout", "seconds one LLM request may take (default 600)", type=positive_float, default=None, metavar="SECONDS", scopes=PYTEST),
    Option("llm_retries", "retries of a rate-limited (429) or failed (5xx) LLM request, by the SDK with backoff (default 2)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("thinking_tokens", "extended-thinking budget per request, Anthropic models (default 0: off)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("search_seed", "seed of the search: runs with different seeds ask the model for different samples (distinct cache keys) and draw qd parents differently (default 0)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("critic", "who critiques each evaluated candidate: rules (no LLM, the default), llm (the proposer's model), or a model of its own, spelled like --maxcode-llm (e.g. anthropic:claude-opus-4-1)", default=None, metavar="CRITIC", scopes=PYTEST),
    Option("critic_thinking_tokens", "extended-thinking budget of the LLM critic's requests (default 0: off)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("parallel_targets", "targets searched at once: their LLM requests overlap, oracle work takes turns (default 1)", type=int, default=None, metavar="N", scopes=PYTEST),
    Option("json_path", "also write the JSON report here (it always lands in .maxcode/reports/)", metavar="PATH", spelled="json", scopes=PYTEST),
    Option("remeasure", "time stored candidates again instead of reusing their stored verdicts (a stored verdict too noisy to decide is re-timed anyway)", action="store_true", default=None, scopes=PYTEST),
    Option("apply", "write each verified best kernel to maxcode_kernels/ and maxcode.lock", action="store_true", default=None, scopes=PYTEST),
    Option("executor", "where builds, checks and timings run: local (this machine) or ray (a pool of Ray actors, one per GPU, or one per node on CPU; pip install 'pytest-maxcode[ray]') (default local)", choices=("local", "ray"), default=None, scopes=PYTEST),
    Option("ray_address", "the Ray cluster of --maxcode-executor=ray, e.g. HOST:6379 or ray://HOST:10001 (default: RAY_ADDRESS, else a local Ray instance started here)", default=None, metavar="ADDRESS", scopes=PYTEST),
    Option("ray_actors", "with --maxcode-executor=ray: checking actors, each timing alone on its GPU or node (default: one per GPU with --device cuda, else one per node; more per node time in each other's noise)", type=int, default=None, metavar="N", scopes=PYTEST),
)

#: [tool.maxcode] keys, and the defaults that apply when neither the command line nor the file sets one
SETTINGS_DEFAULTS: dict[str, Any] = {
    "target": None,
    "budget": 8,
    "time": None,
    "policy": None,
    "json_path": None,
    "apply": False,
    "remeasure": False,
    "min_speedup": 1.05,
    "device": None,
    "sandbox": "auto",
    "torch_compile": True,  # the built-in policy's torch.compile variants ([tool.maxcode] only)
    "llm": None,
    "record": None,
    "strategy": None,
    "observation": None,
    "format": None,
    "k": 4,
    "depth": None,
    "width": 2,
    "rerank": "none",
    "rerank_top": None,
    "rerank_llm": None,
    "llm_calls": None,
    "tokens": None,
    "cost": None,
    "run_budget": None,
    "run_time": None,
    "run_llm_calls": None,
    "run_tokens": None,
    "run_cost": None,
    "llm_concurrency": 4,
    "llm_timeout": 600.0,
    "thinking_tokens": 0,
    "search_seed": 0,
    "critic": "rules",
    "critic_thinking_tokens": 0,
    "parallel_targets": 1,
    "executor": "local",
    "ray_address": None,
    "ray_actors": None,
    # [tool.maxcode] only
    "llm_retries": 2,
    "llm_cache": True,
    "max_tokens": 8192,
    "temperature": 1.0,
    "prices": None,  # {"model": {"input": USD/Mtok, "output": ..., "cache_write": ..., "cache_read": ...}}
    "qd": None,  # the qd strategy's staged schedule: {stages = [...], targets = {GLOB = {stages = [...]}}}
    "regressions": None,  # maxcode compare: {threshold = 0.1, thresholds = {GLOB = 0.25}}
    "programs": None,  # C++ program targets: {NAME = {source = "a.cpp", testcases = "DIR", ...}}
    "accept_range_limited": False,  # true, or target-id globs: see accepts_range_limited
}

POSITIVE_INTS = ("budget", "k", "rerank_top", "depth", "width", "llm_calls", "tokens", "run_budget", "run_llm_calls", "run_tokens",
                 "llm_concurrency", "parallel_targets", "max_tokens", "ray_actors")
NON_NEGATIVE_INTS = ("thinking_tokens", "critic_thinking_tokens", "llm_retries", "search_seed")


def for_scope(scope: str) -> list[Option]:
    return [o for o in OPTIONS if scope in o.scopes]


def add_to_argparse(parser: argparse.ArgumentParser, scope: str) -> None:
    for opt in for_scope(scope):
        parser.add_argument(opt.flag(), **opt.kwargs())


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
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

#: [tool.maxcode] keys that no command-line option spells, with their parsers
FILE_ONLY: dict[str, Callable[[str], Any]] = {
    "llm_retries": non_negative_int,
    "max_tokens": positive_int,
    "temperature": non_negative_float,
}
FILE_ONLY_BOOLS = ("torch_compile", "llm_cache")
TABLES = ("prices", "qd", "regressions", "programs")


def _toml(value: Any) -> str:
    """A value as it was written in pyproject.toml."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{...}"
    return repr(value)


def _parser_for(name: str, opt: Option | None) -> Callable[[str], Any] | None:
    if name in POSITIVE_INTS:
        return positive_int
    if name in NON_NEGATIVE_INTS:
        return non_negative_int
    if name in FILE_ONLY:
        return FILE_ONLY[name]
    return opt.type if opt is not None else None


def file_value(name: str, value: Any) -> Any:
    """One ``[tool.maxcode]`` value, checked and converted by the parser its command-line
    option uses; raises ValueError(what is accepted) for a bad one."""
    opt = next((o for o in OPTIONS if o.name == name), None)
    if name in FILE_ONLY_BOOLS or (opt is not None and opt.action == "store_true"):
        if not isinstance(value, bool):
            raise ValueError("expected true or false (a TOML boolean, unquoted)")
        return value
    if name in TABLES:
        if not isinstance(value, dict):
            raise ValueError(f"expected a table ([tool.maxcode.{name}])")
        return value
    if name == "accept_range_limited":
        if isinstance(value, bool) or (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            return value
        raise ValueError("expected true, false, or a list of target-id globs, e.g. [\"mylib.*\"]")
    if name == "target":
        if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            return value
        raise ValueError("expected a glob or a list of globs, e.g. \"mylib.*\"")
    if opt is not None and opt.choices:
        if not isinstance(value, str) or value not in opt.choices:
            raise ValueError(f"expected one of {', '.join(opt.choices)}")
        return value
    parser = _parser_for(name, opt)
    if parser is None:  # free text: a name, a spec, a path
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a string{f' ({opt.metavar})' if opt is not None and opt.metavar else ''}")
        return value
    accepts = ACCEPTS.get(parser, "a value its command-line option accepts")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected {accepts}")
    if parser in (int, positive_int, non_negative_int) and isinstance(value, float):
        raise ValueError(f"expected {accepts}")
    try:
        return parser(str(value))
    except (argparse.ArgumentTypeError, ValueError):
        raise ValueError(f"expected {accepts}") from None


def _check_tables(out: dict[str, Any], pyproject: Path | None) -> None:
    """The tables' own parsers, their errors as one line."""
    from .errors import MaxcodeError

    try:
        if out["prices"] is not None:
            from .llm.pricing import Prices

            Prices(out["prices"])
        if out["regressions"] is not None:
            from .bot.compare import thresholds_from

            thresholds_from(out["regressions"])
    except MaxcodeError as e:
        raise ValueError(f"{pyproject}: {e}" if pyproject is not None else str(e)) from None
    if out["qd"] is not None:
        from .search.strategies.qd import parse_stages

        parse_stages(out["qd"])
    if out["programs"] is not None and pyproject is not None:
        from .targets.program import parse_programs

        parse_programs(out["programs"], pyproject.parent)


def load_settings(cli: dict[str, Any], pyproject: Path | None) -> dict[str, Any]:
    """Command line over ``[tool.maxcode]`` over the defaults. Unknown keys and bad values are
    an error naming the key, the value and what is accepted: the file's values go through the
    same parsers as the command line's."""
    file_values: dict[str, Any] = {}
    if pyproject is not None and pyproject.is_file():
        import tomllib

        try:
            data = tomllib.loads(pyproject.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{pyproject}: {e}") from None
        raw = data.get("tool", {}).get("maxcode", {})
        for key, value in raw.items():
            name = "json_path" if key == "json" else key.replace("-", "_")
            if name not in SETTINGS_DEFAULTS:
                known = ", ".join(sorted(k if k != "json_path" else "json" for k in SETTINGS_DEFAULTS))
                raise ValueError(f"{pyproject}: [tool.maxcode] has no setting {key!r} (known: {known})")
            try:
                file_values[name] = file_value(name, value)
            except ValueError as e:
                raise ValueError(f"{pyproject}: [tool.maxcode] {key} = {_toml(value)}: {e}") from None
    out = dict(SETTINGS_DEFAULTS)
    out.update({k: v for k, v in file_values.items()})
    out.update({k: v for k, v in cli.items() if v is not None})
    if isinstance(out["target"], str):
        out["target"] = [out["target"]]
    for key in POSITIVE_INTS + NON_NEGATIVE_INTS:
        v = out[key]
        low = 1 if key in POSITIVE_INTS else 0
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise ValueError(f"{key.replace('_', '-')} must be {'a positive' if low else 'a non-negative'} integer, not {v!r}")
    for key in ("cost", "run_cost", "run_time", "time", "llm_timeout"):
        v = out[key]
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0):
            raise ValueError(f"{key.replace('_', '-')} must be a number greater than 0, not {v!r}")
    if out["executor"] not in ("local", "ray"):
        raise ValueError(f"executor must be local or ray, not {out['executor']!r}")
    _check_tables(out, pyproject)
    if out["observation"] is not None:
        from .search.observation import parse_observation

        parse_observation(out["observation"])
    return out


def accepts_range_limited(target_id: str, declared: bool | None, setting: bool | list[str] | None) -> bool:
    """Whether a target's range-limited result (correct on the captured range, wrong on a wider
    one or on special values) may still be applied and proposed. The one rule for it: the
    target's own ``@maxcode.optimize(accept_range_limited=...)`` when given, else
    ``[tool.maxcode] accept_range_limited``: ``true``, ``false``, or globs of target ids
    (the only way to set it for a C++ program target)."""
    if declared is not None:
        return bool(declared)
    if isinstance(setting, list):
        from fnmatch import fnmatchcase

        return any(fnmatchcase(target_id, pattern) for pattern in setting)
    return bool(setting)


def add_to_pytest(group: Any) -> None:
    group.addoption("--maxcode", action="store_true", default=False, help="optimize the targets marked with @maxcode.optimize")
    for opt in for_scope("pytest"):
        kw = opt.kwargs()
        kw["dest"] = f"maxcode_{opt.name}"
        group.addoption(opt.flag("maxcode-"), **kw)
