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
import hashlib
import json
import math
import os
import re
import selectors
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from .._files import write_atomic
from ..errors import MaxcodeError
from ..sandbox.isolation import Isolation, Limits, prepare, resolve
from ..sandbox.env import scrubbed_env
from ..options import positive_float, positive_int

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

CXX = "g++"
DEFAULT_CXXFLAGS = "-O3 --std=c++17"
TOLERANCE = 1e-3
OPT_THRESHOLD = 1.10
OUTPUT_CAP = 16 << 20
COMPILE_TIMEOUT = 300.0
VALGRIND_SLOWDOWN = 50  # callgrind runs this many times slower than native: its time limit scales with it
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


def output_lines(text: str) -> list[str]:
    """Lines with trailing whitespace stripped and trailing empty lines dropped: judges ignore both."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _number(token: str) -> float | None:
    if "_" in token:  # float() accepts 1_000; a judge would not
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def tokens_match(actual: str, expected: str) -> bool:
    """Equal, or both numbers within PIE's absolute tolerance (so 0.3333 matches 0.333333)."""
    if actual == expected:
        return True
    a, b = _number(actual), _number(expected)
    return a is not None and b is not None and abs(a - b) < TOLERANCE


def lines_match(actual: str, expected: str) -> bool:
    """PIE's per-line rule, applied token by token so '1.5 2' matches '1.50001 2'."""
    if actual == expected:
        return True
    ta, tb = actual.split(), expected.split()
    return len(ta) == len(tb) and all(tokens_match(a, b) for a, b in zip(ta, tb))


def first_difference(actual: str, expected: str) -> str | None:
    """None when the outputs match by PIE's rule, else where they first differ (for the reason column)."""
    got, want = output_lines(actual), output_lines(expected)
    for i, (a, b) in enumerate(zip(got, want)):
        if not lines_match(a, b):
            return f"line {i + 1}: got {_clip(a)}, expected {_clip(b)}"
    if len(got) != len(want):
        return f"{len(got)} lines, expected {len(want)}"
    return None


def outputs_match(actual: str, expected: str) -> bool:
    return first_difference(actual, expected) is None


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


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


def first_error_line(stderr: str, returncode: int) -> str:
    """The compiler's first error, which is the one that explains the others."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or "undefined reference" in line:
            return line
    return lines[0] if lines else f"{CXX} exited with status {returncode}"


def parse_callgrind(text: str) -> int:
    """Instructions executed, from a callgrind output file's summary (or totals) line."""
    for key in ("summary:", "totals:"):
        for line in text.splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    raise ValueError("no summary: or totals: line in the callgrind output")


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


@dataclass(frozen=True)
class TestCase:
    index: int
    input: Path
    expected: str


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


def tests_in(folder: Path, label: str) -> list[TestCase]:
    """PIE's public test layout: input.<k>.txt with its output.<k>.txt, in order of k."""
    indices = sorted(int(m.group(1)) for p in folder.glob("input.*.txt") if (m := re.fullmatch(r"input\.(\d+)\.txt", p.name)))
    if not indices:
        raise MaxcodeError(f"{label}: no test cases ({folder}/input.<k>.txt)")
    tests = []
    for k in indices:
        expected = folder / f"output.{k}.txt"
        if not expected.is_file():
            raise MaxcodeError(f"{label}: {folder}/input.{k}.txt has no output.{k}.txt")
        tests.append(TestCase(k, folder / f"input.{k}.txt", expected.read_text(encoding="utf-8", errors="replace")))
    return tests


# ---------------------------------------------------------------- compiling, cached by source hash


@dataclass(frozen=True)
class Build:
    binary: Path | None
    error: str | None  # the compiler's first error line when it failed
    cached: bool


def source_key(code: str, flags: Sequence[str]) -> str:
    return hashlib.sha256("\0".join([CXX, *flags, code]).encode()).hexdigest()


def compile_program(code: str, flags: Sequence[str], cache: Path, isolation: Isolation | None = None) -> Build:
    """Compile once per (source, flags): a failure is cached too, it would fail the same way again.

    With ``isolation`` the compiler runs in that sandbox, only its temporary folder writable
    (an ``#include`` of a credential file or ``/proc/self/environ`` finds nothing).
    """
    key = source_key(code, flags)
    binary, error = cache / key, cache / f"{key}.err"
    if binary.is_file():
        return Build(binary, None, True)
    if error.is_file():
        return Build(None, error.read_text(), True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        (Path(tmp) / "prog.cpp").write_text(code, encoding="utf-8")
        argv = [CXX, *flags, "prog.cpp", "-o", "prog"]
        boxed = prepare(argv, isolation, Path(tmp), Limits(memory=4 << 30, pids=256, file_size=1 << 30)) if isolation else None
        try:
            proc = subprocess.run(boxed.argv if boxed else argv, cwd=tmp, capture_output=True, start_new_session=boxed is not None,
                                  env={**scrubbed_env(), "LC_ALL": "C"}, text=True, errors="replace", timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Build(None, f"{CXX} took over {COMPILE_TIMEOUT:.0f}s", False)
        finally:
            if boxed is not None:
                boxed.cleanup()
        if proc.returncode != 0:
            message = first_error_line(proc.stderr, proc.returncode)
            (Path(tmp) / "err").write_text(message)
            os.replace(Path(tmp) / "err", error)
            return Build(None, message, False)
        os.replace(Path(tmp) / "prog", binary)
    return Build(binary, None, False)


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


class SuiteFailure(Exception):
    """A program failed a test case; the message is the reason shown in the table."""


@dataclass(frozen=True)
class Sandbox:
    """What an untrusted program runs under: an environment, and resource limits set on its pid
    as soon as it starts (a pre-exec hook would cost a full fork, milliseconds per run, and
    would blur the timings).

    With ``isolation`` each run starts in that OS sandbox instead, with ``os_limits`` (its
    working folder the only writable one, ``readable`` the folders under /tmp it reads); that
    costs milliseconds per run, the same for the source and the candidate.
    """

    env: dict[str, str] | None = None
    limits: Callable[[int], None] | None = None
    isolation: Isolation | None = None
    os_limits: Limits = Limits()
    readable: tuple[Path, ...] = ()


def run_program(cmd: Sequence[str], stdin: Path, timeout: float, cwd: Path,
                sandbox: Sandbox | None = None) -> tuple[str | None, str, float]:
    """Run with stdin from a file, stdout capped; returns (failure or None, stdout, wall seconds).

    The program gets its own process group so a timeout kills whatever it started too.
    """
    box = sandbox or Sandbox()
    boxed = None
    if box.isolation is not None:
        boxed = prepare(list(cmd), box.isolation, cwd, box.os_limits,
                        readable=[*box.readable, Path(cmd[-1]).parent, Path(stdin).parent], use_cgroups=False)
    with open(stdin, "rb") as f:
        start = time.perf_counter()
        proc = subprocess.Popen(boxed.argv if boxed else list(cmd), stdin=f, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True, env=box.env)
    try:
        if box.limits is not None and boxed is None:
            try:
                box.limits(proc.pid)
            except (ProcessLookupError, PermissionError):  # it already exited
                pass
        failure, out = _collect(proc, start + timeout)
        seconds = time.perf_counter() - start
    finally:
        _kill_group(proc)
        if boxed is not None:
            boxed.cleanup()
    if failure is None and proc.returncode:
        failure = exit_reason(proc.returncode)
    if failure == "timeout":
        failure = f"timed out (> {timeout:g}s)"
    return failure, out.decode("utf-8", errors="replace"), seconds


def exit_reason(returncode: int) -> str:
    """A judge's runtime error: a nonzero status, or the signal that killed the program."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[str | None, bytes]:
    """Read stdout until EOF and the exit, stopping at the deadline or the output cap."""
    assert proc.stdout is not None
    fd, chunks, size = proc.stdout.fileno(), [], 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return "timeout", b""
            if not sel.select(left):
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                break
            size += len(data)
            if size > OUTPUT_CAP:
                return f"output over {OUTPUT_CAP >> 20} MiB", b""
            chunks.append(data)
    try:
        proc.wait(max(0.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        return "timeout", b""
    return None, b"".join(chunks)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


def judged_run(cmd: Sequence[str], test: TestCase, timeout: float, cwd: Path, sandbox: Sandbox | None = None) -> tuple[str | None, float]:
    """One run with its output compared by PIE's rule: (failure or None, wall seconds)."""
    failure, out, seconds = run_program(cmd, test.input, timeout, cwd, sandbox)
    if failure is None and (diff := first_difference(out, test.expected)) is not None:
        failure = f"wrong output ({diff})"
    return failure, seconds


def run_case(cmd: Sequence[str], test: TestCase, timeout: float, cwd: Path, sandbox: Sandbox | None = None) -> float:
    """One checked run: the wall seconds, or SuiteFailure naming the test case and what went wrong."""
    failure, seconds = judged_run(cmd, test, timeout, cwd, sandbox)
    if failure:
        raise SuiteFailure(f"test {test.index}: {failure}")
    return seconds


def run_suite(binary: Path, tests: Sequence[TestCase], timeout: float, cwd: Path) -> float:
    """Wall seconds of the whole test suite, every output checked (a timed run must be a correct one)."""
    return sum(run_case([str(binary)], t, timeout, cwd) for t in tests)


def count_instructions(binary: Path, tests: Sequence[TestCase], timeout: float, cwd: Path, sandbox: Sandbox | None = None) -> int:
    """Instructions over the whole test suite under callgrind: deterministic, so one run suffices."""
    total = 0
    with tempfile.TemporaryDirectory(dir=cwd) as tmp:
        for t in tests:
            out = Path(tmp) / f"callgrind.{t.index}.out"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary)]
            run_case(cmd, t, timeout * VALGRIND_SLOWDOWN, cwd, sandbox)
            try:
                total += parse_callgrind(out.read_text())
            except (OSError, ValueError) as e:
                raise SuiteFailure(f"test {t.index}: callgrind gave no count ({e})") from None
    return total


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
        run_suite(src.binary, tests, s.timeout, s.scratch)
    except SuiteFailure as e:
        return Verdict(pair, invalid=f"source fails {e}")
    if pair.candidate is None:
        return Verdict(pair, reason="no candidate")
    cand = s.builds[pair.candidate]
    if cand.binary is None:
        return Verdict(pair, reason=f"does not compile: {cand.error}")
    try:
        run_suite(cand.binary, tests, s.timeout, s.scratch)
    except SuiteFailure as e:
        return Verdict(pair, reason=str(e))
    return Verdict(pair)


def time_wall(src: Path, cand: Path, tests: Sequence[TestCase], s: Setup) -> tuple[float, float]:
    """Medians of whole-suite wall times, runs interleaved ABAB so both see the same machine drift."""
    run_suite(src, tests, s.timeout, s.scratch)
    run_suite(cand, tests, s.timeout, s.scratch)
    a, b = [], []
    for _ in range(s.repeats):
        a.append(_timed("source", src, tests, s))
        b.append(_timed("candidate", cand, tests, s))
    return statistics.median(a), statistics.median(b)


def _timed(who: str, binary: Path, tests: Sequence[TestCase], s: Setup) -> float:
    try:
        return run_suite(binary, tests, s.timeout, s.scratch)
    except SuiteFailure as e:
        raise SuiteFailure(f"{who} failed a timed run: {e}") from None


def time_instructions(src: Path, cand: Path, tests: Sequence[TestCase], s: Setup) -> tuple[float, float]:
    try:
        a = count_instructions(src, tests, s.timeout, s.scratch)
    except SuiteFailure as e:
        raise SuiteFailure(f"source failed under callgrind: {e}") from None
    try:
        b = count_instructions(cand, tests, s.timeout, s.scratch)
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
    # the compilers run in the strongest sandbox here; the timed runs do not (10-20 ms per start
    # would distort PIE's speedups, and both sides run alike)
    builds = compile_all(codes, flags, cache, ns.jobs, resolve("auto"))
    with tempfile.TemporaryDirectory(prefix="maxcode-pie-") as scratch:
        setup = Setup(tests, builds, ns.timeout, ns.repeats, ns.timer, ns.jobs, Path(scratch))
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
