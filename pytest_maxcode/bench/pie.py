"""``maxcode bench pie``: PIE's C++ benchmark (Shypula et al.), scored by PIE's own rules.

A problem pair is a slow C++ program (``src_code``) and a candidate rewrite. Both are
compiled with ``g++ -O3 --std=c++17`` and run on the problem's public test cases
(``DIR/<problem_id>/input.<k>.txt`` on stdin, ``output.<k>.txt`` expected on stdout). A
candidate is correct only when it matches every expected output; its speedup is source
time / candidate time, clipped below at 1.0, and 1.0 when it is incorrect. A problem whose
source fails its own tests cannot be scored, so it is reported as invalid and left out.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from .._files import write_atomic
from ..errors import MaxcodeError
# compiling, running and judging a program live below the oracle, which shares them
from ..native.program import (
    CXX,
    VALGRIND_SLOWDOWN,
    Build,
    Sandbox,
    SuiteFailure,
    TestCase,
    compile_program,
    count_instructions,
    program_sandbox,
    run_suite,
    tests_in,
)
from ..native.program import (  # noqa: F401  re-exported: PIE's judging rule and parsers, by their benchmark names
    exit_reason,
    first_difference,
    first_error_line,
    outputs_match,
    parse_callgrind,
)
from ..options import positive_float, positive_int
from ..sandbox.isolation import Isolation, resolve

DESCRIPTION = (
    "PIE (Learning Performance-Improving Code Edits): compile each pair's slow C++ program and its "
    "candidate with g++, run both on the problem's test cases (TESTCASES/<problem_id>/input.<k>.txt on "
    "stdin, output.<k>.txt expected), and score by PIE's rules: a candidate is correct when every "
    "output matches (lines equal, tokens equal, or numbers within 1e-3); speedup = source time / "
    "candidate time clipped below at 1.0 (1.0 when incorrect); %Opt = share of problems correct at "
    ">= 1.10x. Problems whose source fails its own tests are reported as invalid and left out. "
    "Candidates come from --candidate-key (default tgt_code) or --generations. Writes JSON and prints "
    "a markdown table. Exit status 0 when the run finished, 2 for a usage error."
)

DEFAULT_CXXFLAGS = "-O3 --std=c++17"
OPT_THRESHOLD = 1.10
ID_KEYS = ("submission_id_v0", "id")
GENERATION_KEYS = ("generated_answers", "code")

T = TypeVar("T")
R = TypeVar("R")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.jsonl", help="PIE problem pairs, one JSON object a line")
    parser.add_argument("--testcases", required=True, metavar="DIR",
                        help="test cases: DIR/<problem_id>/input.<k>.txt and output.<k>.txt")
    parser.add_argument("--generations", metavar="FILE.jsonl",
                        help="candidates keyed by the same id (submission_id_v0), code under generated_answers "
                             "(first of the list) or code")
    parser.add_argument("--candidate-key", metavar="KEY",
                        help="the column holding the candidate (default tgt_code, or generated_answers/code "
                             "with --generations)")
    parser.add_argument("--source-key", default="src_code", metavar="KEY",
                        help="the column holding the slow program (default src_code)")
    parser.add_argument("--cxxflags", default=DEFAULT_CXXFLAGS, metavar="FLAGS",
                        help=f"g++ flags, one string (default {DEFAULT_CXXFLAGS!r}; write --cxxflags='-O2 ...')")
    parser.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1, metavar="N",
                        help="parallel compiles, checks and instruction counts (default: cores); "
                             "wall-clock timing always runs one program at a time")
    parser.add_argument("--cache", metavar="DIR", help="compiled programs, by source hash (default .maxcode/pie-cache)")
    parser.add_argument("--timeout", type=positive_float, default=10.0, metavar="S",
                        help="seconds per test case run (default 10; x%d under valgrind)" % VALGRIND_SLOWDOWN)
    parser.add_argument("--repeats", type=positive_int, default=3, metavar="N",
                        help="timed runs of each test suite after one warm-up, median taken (default 3)")
    parser.add_argument("--timer", choices=("wall", "instructions"), default="wall",
                        help="wall: median wall time, source and candidate interleaved; instructions: "
                             "valgrind callgrind's deterministic instruction count, one run each")
    parser.add_argument("--json", metavar="PATH", help="the JSON result (default .maxcode/bench/pie-<time>.json)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the markdown table here")


# ---------------------------------------------------------------- pure parts: outputs and metrics
















def clipped_speedup(source: float, candidate: float) -> float:
    """PIE's speedup: a slower candidate scores 1.0, as if the source had been kept."""
    if candidate <= 0:
        return 1.0
    return max(1.0, source / candidate)


@dataclass
class Row:
    """One problem pair's result: the JSON row and the table row."""

    id: str
    problem_id: str
    correct: bool
    optimized: bool
    reason: str | None
    source_time: float | None
    candidate_time: float | None
    speedup: float


def scored_row(pid: str, problem_id: str, source_time: float, candidate_time: float) -> Row:
    speedup = clipped_speedup(source_time, candidate_time)
    return Row(pid, problem_id, True, speedup >= OPT_THRESHOLD, None, source_time, candidate_time, speedup)


def failed_row(pid: str, problem_id: str, reason: str) -> Row:
    return Row(pid, problem_id, False, False, reason, None, None, 1.0)


def summarize(rows: Sequence[Row], invalid: int = 0) -> dict[str, Any]:
    """PIE's headline numbers over the valid problems: mean speedup, %Opt, correctness."""
    n = len(rows)
    correct = sum(r.correct for r in rows)
    optimized = sum(r.optimized for r in rows)
    return {
        "problems": n,
        "invalid": invalid,
        "correct": correct,
        "optimized": optimized,
        "mean_speedup": statistics.fmean(r.speedup for r in rows) if n else None,
        "percent_opt": 100.0 * optimized / n if n else None,
        "percent_correct": 100.0 * correct / n if n else None,
    }






def markdown_table(result: dict[str, Any]) -> str:
    """The result as markdown: headline metrics, one row per problem, then the invalid problems."""
    m, unit = result["metrics"], result["timer"]
    timer = f"median of {result['repeats']} wall-clock runs" if unit == "wall" else "instructions (callgrind)"
    out = [f"## PIE: {m['problems']} problems, {timer}", ""]
    out += ["| mean speedup | %Opt (>= 1.10x) | correct | invalid |", "|---:|---:|---:|---:|"]
    if m["problems"]:
        out.append(f"| {m['mean_speedup']:.2f}x | {m['percent_opt']:.1f}% | {m['correct']}/{m['problems']} "
                   f"({m['percent_correct']:.1f}%) | {m['invalid']} |")
    else:
        out.append(f"| - | - | 0/0 | {m['invalid']} |")
    out += ["", "| id | problem | correct | speedup | source | candidate | reason |", "|---|---|---|---:|---:|---:|---|"]
    for r in result["problems"]:
        mark = ("yes, optimized" if r["optimized"] else "yes") if r["correct"] else "no"
        out.append(f"| {_cell(r['id'])} | {_cell(r['problem_id'])} | {mark} | {r['speedup']:.2f}x | "
                   f"{_measure(r['source_time'], unit)} | {_measure(r['candidate_time'], unit)} | {_cell(r['reason'] or '')} |")
    if result["invalid"]:
        out += ["", "Invalid (the source fails its own tests; left out of the metrics):", "",
                "| id | problem | reason |", "|---|---|---|"]
        out += [f"| {_cell(r['id'])} | {_cell(r['problem_id'])} | {_cell(r['reason'])} |" for r in result["invalid"]]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _measure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "instructions":
        return f"{value / 1e6:.2f}M instr"
    return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.3f} s"


# ---------------------------------------------------------------- inputs: pairs and test cases


@dataclass(frozen=True)
class Pair:
    id: str
    problem_id: str
    source: str
    candidate: str | None  # None: no candidate was given for this pair




def _read_jsonl(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise MaxcodeError(f"{path}: no such file")
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise MaxcodeError(f"{path}:{lineno}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise MaxcodeError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, obj


def _pair_id(obj: dict[str, Any], lineno: int) -> str:
    for key in ID_KEYS:
        if obj.get(key) is not None:
            return str(obj[key])
    return f"{obj.get('problem_id', 'line')}:{lineno}"


def _code(value: Any) -> str | None:
    """A candidate cell: a string, or a list of generations of which PIE scores the first."""
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and value.strip() else None


def load_generations(path: Path, key: str | None) -> dict[str, str | None]:
    keys = (key,) if key else GENERATION_KEYS
    out: dict[str, str | None] = {}
    for lineno, obj in _read_jsonl(path):
        out[_pair_id(obj, lineno)] = next((c for k in keys if (c := _code(obj.get(k))) is not None), None)
    return out


def load_pairs(path: Path, source_key: str, candidate_key: str | None, generations: Path | None) -> list[Pair]:
    """The pairs of FILE.jsonl, each with its candidate from the column or the generations file."""
    generated = load_generations(generations, candidate_key) if generations else None
    column = candidate_key or "tgt_code"
    pairs: list[Pair] = []
    seen: set[str] = set()
    for lineno, obj in _read_jsonl(path):
        if not isinstance(obj.get("problem_id"), str) or not isinstance(obj.get(source_key), str):
            raise MaxcodeError(f"{path}:{lineno}: needs problem_id and {source_key}")
        pid = _pair_id(obj, lineno)
        if pid in seen:
            raise MaxcodeError(f"{path}:{lineno}: duplicate id {pid!r}")
        seen.add(pid)
        candidate = generated.get(pid) if generated is not None else _code(obj.get(column))
        pairs.append(Pair(pid, obj["problem_id"], obj[source_key], candidate))
    if not pairs:
        raise MaxcodeError(f"{path}: no problem pairs")
    return pairs


def load_tests(root: Path, problem_id: str) -> list[TestCase]:
    return tests_in(root / problem_id, f"problem {problem_id}")




# ---------------------------------------------------------------- compiling, cached by source hash








def compile_all(codes: Iterable[str], flags: Sequence[str], cache: Path, jobs: int,
                isolation: Isolation | None = None) -> dict[str, Build]:
    cache.mkdir(parents=True, exist_ok=True)
    unique = sorted(set(codes))
    builds = parallel_map(lambda c: compile_program(c, flags, cache, isolation), unique, jobs)
    return dict(zip(unique, builds))


def parallel_map(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    if jobs <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items))


# ---------------------------------------------------------------- running on test cases






















# ---------------------------------------------------------------- the benchmark


@dataclass(frozen=True)
class Setup:
    tests: dict[str, list[TestCase]]
    builds: dict[str, Build]
    timeout: float
    repeats: int
    timer: str
    jobs: int
    scratch: Path
    #: what the programs run under (the source's and the candidate's alike)
    sandbox: Sandbox | None = None


@dataclass
class Verdict:
    """After the correctness check: invalid (source fails), incorrect (reason), or ready to time."""

    pair: Pair
    invalid: str | None = None
    reason: str | None = None


def check_pair(pair: Pair, s: Setup) -> Verdict:
    """Source against its own expected outputs first, then the candidate."""
    tests, src = s.tests[pair.problem_id], s.builds[pair.source]
    if src.binary is None:
        return Verdict(pair, invalid=f"source does not compile: {src.error}")
    try:
        run_suite(src.binary, tests, s.timeout, s.scratch, s.sandbox)
    except SuiteFailure as e:
        return Verdict(pair, invalid=f"source fails {e}")
    if pair.candidate is None:
        return Verdict(pair, reason="no candidate")
    cand = s.builds[pair.candidate]
    if cand.binary is None:
        return Verdict(pair, reason=f"does not compile: {cand.error}")
    try:
        run_suite(cand.binary, tests, s.timeout, s.scratch, s.sandbox)
    except SuiteFailure as e:
        return Verdict(pair, reason=str(e))
    return Verdict(pair)


def time_wall(src: Path, cand: Path, tests: Sequence[TestCase], s: Setup) -> tuple[float, float]:
    """Medians of whole-suite wall times, runs interleaved ABAB so both see the same machine drift."""
    run_suite(src, tests, s.timeout, s.scratch, s.sandbox)
    run_suite(cand, tests, s.timeout, s.scratch, s.sandbox)
    a, b = [], []
    for _ in range(s.repeats):
        a.append(_timed("source", src, tests, s))
        b.append(_timed("candidate", cand, tests, s))
    return statistics.median(a), statistics.median(b)


def _timed(who: str, binary: Path, tests: Sequence[TestCase], s: Setup) -> float:
    try:
        return run_suite(binary, tests, s.timeout, s.scratch, s.sandbox)
    except SuiteFailure as e:
        raise SuiteFailure(f"{who} failed a timed run: {e}") from None


def time_instructions(src: Path, cand: Path, tests: Sequence[TestCase], s: Setup) -> tuple[float, float]:
    try:
        a = count_instructions(src, tests, s.timeout, s.scratch, s.sandbox)
    except SuiteFailure as e:
        raise SuiteFailure(f"source failed under callgrind: {e}") from None
    try:
        b = count_instructions(cand, tests, s.timeout, s.scratch, s.sandbox)
    except SuiteFailure as e:
        raise SuiteFailure(f"candidate failed under callgrind: {e}") from None
    return float(a), float(b)


def score(v: Verdict, s: Setup) -> Row:
    """Time a correct candidate against its source; a failure while timing makes it incorrect."""
    p = v.pair
    if v.reason is not None:
        return failed_row(p.id, p.problem_id, v.reason)
    assert p.candidate is not None
    src, cand = s.builds[p.source].binary, s.builds[p.candidate].binary
    assert src is not None and cand is not None
    timer = time_instructions if s.timer == "instructions" else time_wall
    try:
        source_time, candidate_time = timer(src, cand, s.tests[p.problem_id], s)
    except SuiteFailure as e:
        return failed_row(p.id, p.problem_id, str(e))
    return scored_row(p.id, p.problem_id, source_time, candidate_time)


def evaluate(pairs: Sequence[Pair], s: Setup) -> tuple[list[Row], list[dict[str, str]]]:
    """Checks in parallel; wall timing one pair at a time (parallel runs would share cores and caches)."""
    verdicts = parallel_map(lambda p: check_pair(p, s), pairs, s.jobs)
    invalid = [{"id": v.pair.id, "problem_id": v.pair.problem_id, "reason": v.invalid} for v in verdicts if v.invalid]
    valid = [v for v in verdicts if not v.invalid]
    jobs = s.jobs if s.timer == "instructions" else 1
    rows = parallel_map(lambda v: score(v, s), valid, jobs)
    return rows, invalid


def _require_tools(timer: str) -> None:
    if shutil.which(CXX) is None:
        raise MaxcodeError(f"{CXX} not found on PATH; PIE compiles with g++")
    if timer == "instructions" and shutil.which("valgrind") is None:
        raise MaxcodeError("--timer instructions needs valgrind on PATH (apt-get install valgrind), or use --timer wall")


def run(ns: argparse.Namespace) -> int:
    _require_tools(ns.timer)
    root = Path(ns.testcases)
    if not root.is_dir():
        raise MaxcodeError(f"--testcases {root}: no such directory")
    try:
        flags = shlex.split(ns.cxxflags)
    except ValueError as e:
        raise MaxcodeError(f"--cxxflags: {e}") from None
    pairs = load_pairs(Path(ns.file), ns.source_key, ns.candidate_key, Path(ns.generations) if ns.generations else None)
    tests = {pid: load_tests(root, pid) for pid in sorted({p.problem_id for p in pairs})}
    started = time.time()
    cache = Path(ns.cache or ".maxcode/pie-cache").resolve()  # programs run in a scratch dir
    codes = [c for p in pairs for c in (p.source, p.candidate) if c is not None]
    sys.stderr.write(f"pie: compiling {len(set(codes))} programs ({ns.jobs} jobs)\n")
    # the compilers and the programs run in the strongest sandbox here: the candidates are model
    # output (a start costs ~5 ms per run, the source's and the candidate's alike)
    isolation = resolve("auto")
    builds = compile_all(codes, flags, cache, ns.jobs, isolation)
    cpu = int(ns.timeout * (VALGRIND_SLOWDOWN if ns.timer == "instructions" else 1)) + 5
    sandbox = program_sandbox(isolation, cpu, None, hidden=(root.resolve(),))  # the expected outputs are there
    with tempfile.TemporaryDirectory(prefix="maxcode-pie-") as scratch:
        setup = Setup(tests, builds, ns.timeout, ns.repeats, ns.timer, ns.jobs, Path(scratch), sandbox)
        sys.stderr.write(f"pie: checking and timing {len(pairs)} pairs on {sum(map(len, tests.values()))} test cases\n")
        rows, invalid = evaluate(pairs, setup)
    result = {
        "suite": "pie",
        "file": ns.file,
        "generations": ns.generations,
        "candidate_key": ns.candidate_key or (None if ns.generations else "tgt_code"),
        "testcases": str(root),
        "cxxflags": ns.cxxflags,
        "timer": ns.timer,
        "unit": "instructions" if ns.timer == "instructions" else "seconds",
        "repeats": 1 if ns.timer == "instructions" else ns.repeats,
        "timeout_s": ns.timeout,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 3),
        "programs": {"compiled": sum(not b.cached for b in builds.values()), "cached": sum(b.cached for b in builds.values())},
        "metrics": summarize(rows, len(invalid)),
        "problems": [asdict(r) for r in rows],
        "invalid": invalid,
    }
    json_path = Path(ns.json or f".maxcode/bench/pie-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json")
    write_atomic(json_path, json.dumps(result, indent=2) + "\n")
    table = markdown_table(result)
    sys.stdout.write(table)
    if ns.markdown:
        write_atomic(Path(ns.markdown), table)
    sys.stderr.write(f"pie: wrote {json_path}\n")
    return 0
