"""The oracle for program targets: a rewrite of a C++ program against the program itself,
on the program's test cases, by PIE's rules, with the tensor oracle's statistics.

Correct means every test case's output matches its expected output (PIE's rule: lines
equal, tokens equal, or numbers within 1e-3). Timing interleaves source and candidate
test case by test case, round after round (order alternating), so each test case is one
workload of ``stats.speedup``: the verdict is the same ratio of medians, the same
bootstrap interval and the same "faster" rule as for kernels, and a "faster" verdict is
measured a second time before it stands. ``timer = "instructions"`` counts instructions
under callgrind instead: deterministic, for noisy machines. The counts come from the
candidate's own process, so, as for native kernels, a build that could issue a valgrind client
request (switch collection off) is rejected by ``scan`` before it runs, and an instruction-count
"faster" is timed again on the trusted wall clock (``check.counts_against_wall``).

Programs run in a scratch folder with a scrubbed environment and resource limits (memory,
CPU time, file size, no core dumps) set on them as they start; the source gets the same
treatment, so timings stay fair, and a timed-out program's whole process group is killed.
The compiler and every run of the source and the candidate go through the OS sandbox in
force (``auto``: the strongest available; a candidate program is model-written code like any
kernel). A sandbox start costs about 5 ms per run on this project's VM, on both sides alike: it
dilutes the speedup of a millisecond-scale program towards 1 (an understatement, never a
gain). Each verdict's ``sandbox`` says which was in force for the runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MaxcodeError
from ..model.protocols import EvaluationStore
from ..model.verdict import UNDECIDED_WIDTH, Verdict, VerdictStatus
from ..native import program as native
from ..sandbox.isolation import resolve
from ..targets.lock import sha256_text
from ..targets.program import ProgramTarget
from . import scan, stats
from .check import (
    CandidateSpec,
    CheckConfig,
    confirmed,
    counts_against_wall,
    decide,
    sandbox_warning,
    scan_rejected,
    second_measurement,
)


@dataclass
class TestCaseWorkload:
    """One test case as a workload: the search and the report treat it like a captured signature."""

    name: str
    case: native.TestCase
    expected: list[str] = field(default_factory=list)  # one "input set": the expected stdout
    weak: list[str] = field(default_factory=list)
    returns: str | None = None

    @property
    def signature(self) -> str:
        return f"stdin {self.case.input.name} ({self.case.input.stat().st_size} bytes)"


def program_config(program: ProgramTarget, min_speedup: float, sandbox: str = "auto") -> CheckConfig:
    """The check's settings for a program: what changes its verdicts goes into the evaluation key."""
    # a round runs every test case once per side, each run a fresh sandboxed process (tens of
    # milliseconds with its setup); rounds go on until the verdict is settled, for up to 1 s of
    # wall time per case; slow programs still get `rounds`
    return CheckConfig(device="cpu", min_speedup=min_speedup, timeout=program.timeout, min_rounds=program.rounds,
                       time_budget=1.0, timer="instructions" if program.timer == "instructions" else "time",
                       cxxflags=list(program.cxxflags), sandbox=sandbox)


def workload_signatures(tests: Sequence[native.TestCase]) -> list[str]:
    """What a verdict depends on besides the code: the test cases' contents."""
    return [f"{t.index}:" + hashlib.sha256(t.input.read_bytes() + b"\0" + t.expected.encode()).hexdigest()[:16] for t in tests]


class ProgramOracle:
    """Verifies and times rewrites of one C++ program; the ``Oracle`` interface, without a worker."""

    def __init__(self, program: ProgramTarget, config: CheckConfig, root: Path, *, store: EvaluationStore | None = None, run_id: int | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.program = program
        self.config = config
        self.root = root
        self.store = store
        self.run_id = run_id
        self.progress = progress or (lambda _msg: None)
        self.device = "cpu"
        self.eval_key = config.key()
        self.cache = root / ".maxcode" / "build" / "programs"
        self.workloads: list[TestCaseWorkload] = []
        self.source_text = (root / program.source).read_text(encoding="utf-8", errors="replace")
        self._source_binary: Path | None = None
        self._scratch: Path | None = None
        #: the compiler's and the runs' sandbox (see the module's docstring)
        self.isolation = resolve(config.sandbox)
        cpu = int(config.timeout * (native.VALGRIND_SLOWDOWN if self.timer == "instructions" else 1)) + 5
        memory = config.max_memory if self.timer == "wall" else None  # valgrind reserves far more address space
        self.sandbox = self.isolation.describe()
        # a program reads nothing but its stdin: the project, and the test cases' expected
        # outputs above all, are no part of its view (see native.Sandbox)
        self._sandbox = native.program_sandbox(self.isolation, cpu, memory, hidden=(root, root / program.testcases))
        warning = sandbox_warning(self.isolation)
        if warning:
            print(f"maxcode: warning: {warning}", file=sys.stderr)
        self._counted: dict[str, list[int]] = {}  # instruction counts per binary (deterministic: counted once)

    @property
    def timer(self) -> str:
        return "instructions" if self.config.timer == "instructions" else "wall"

    # -- lifecycle --------------------------------------------------------------------

    def prepare(self) -> None:
        """The source must compile and pass every one of its own test cases, or nothing can be judged."""
        p = self.program
        if shutil.which(native.CXX) is None:
            raise MaxcodeError(f"program {p.id}: {native.CXX} is not on the PATH; program targets are compiled with g++")
        if self.timer == "instructions" and shutil.which("valgrind") is None:
            raise MaxcodeError(f"program {p.id}: timer = \"instructions\" needs valgrind on the PATH (apt-get install valgrind)")
        tests = self._tests()
        self._scratch = Path(tempfile.mkdtemp(prefix="maxcode-program-"))
        self.progress(f"compiling {p.source} and running it on its {len(tests)} test case(s)")
        build = native.compile_program(self.source_text, p.cxxflags, self._cache(), self.isolation)
        if build.binary is None:
            raise MaxcodeError(f"program {p.id}: {p.source} does not compile with g++ {' '.join(p.cxxflags)}: {build.error}")
        self._source_binary = build.binary
        self.workloads = [TestCaseWorkload(f"test{t.index}", t, [t.expected]) for t in tests]
        for w in self.workloads:
            failure = self._run_case(build.binary, w.case)[0]
            if failure is not None:
                raise MaxcodeError(f"program {p.id}: {p.source} fails its own test case {w.case.input.name}: {failure[1]}; "
                                   "fix the program or the expected output")
        if len({tuple(native.output_lines(w.case.expected)) for w in self.workloads}) < 2:
            weak = ("every test case expects the same output, so a program that prints it unconditionally would pass"
                    if len(self.workloads) > 1 else "one test case: a program that prints its expected output would pass")
            self.workloads[0].weak.append(weak)

    def _tests(self) -> list[native.TestCase]:
        return native.tests_in(self.root / self.program.testcases, f"program {self.program.id}")

    def rerun_test_cases(self, text: str) -> tuple[bool, str]:
        """(passed, summary): ``text`` compiled in a fresh folder (no cache) and run once on every test case."""
        tests = self._tests()
        with tempfile.TemporaryDirectory(prefix="maxcode-verify-") as tmp:
            build = native.compile_program(text, self.program.cxxflags, Path(tmp), self.isolation)
            if build.binary is None:
                return False, f"does not compile: {build.error}"
            failures = [f"{t.input.name}: {failure[1]}" for t in tests
                        if (failure := self._run_case(build.binary, t, Path(tmp))[0]) is not None]
        if failures:
            return False, f"{len(failures)} of {len(tests)} test case(s) failed, first {failures[0]}"
        return True, f"{len(tests)} of {len(tests)} test cases passed"

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> ProgramOracle:
        self.prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cache(self) -> Path:
        self.cache.mkdir(parents=True, exist_ok=True)
        return self.cache

    # -- checking ---------------------------------------------------------------------

    def check(self, candidates: Sequence[CandidateSpec]) -> list[Verdict]:
        self.progress(f"compiling {len(candidates)} program candidate(s)")
        texts = [c.text for c in candidates]
        with ThreadPoolExecutor(max_workers=max(1, min(self.config.jobs or os.cpu_count() or 1, len(texts)))) as pool:
            builds = dict(zip(texts, pool.map(self._compile, texts)))
        verdicts = []
        for i, cand in enumerate(candidates, 1):
            self.progress(f"[{i}/{len(candidates)}] checking {cand.path.name} on {len(self.workloads)} test case(s)")
            v = self._evaluate(cand, builds[cand.text])
            self._record(cand, v)
            verdicts.append(v)
        return verdicts

    def _compile(self, text: str) -> tuple[native.Build, float]:
        t0 = time.monotonic()
        build = native.compile_program(text, self.program.cxxflags, self._cache(), self.isolation)
        return build, time.monotonic() - t0

    def _record(self, cand: CandidateSpec, v: Verdict) -> None:
        if self.store is None:
            return
        p = self.program
        self.store.upsert_target(p.id, "program", str(p.source), sha256_text(self.source_text))
        self.store.add_candidate(cand.hash, cand.format, cand.lang, cand.text, origin=str(cand.path))
        self.store.record_evaluation(run_id=self.run_id, target_id=p.id, config_key=self.eval_key, device="cpu", verdict=v.to_json())

    def _evaluate(self, cand: CandidateSpec, built: tuple[native.Build, float]) -> Verdict:
        build, seconds = built
        v = Verdict(str(cand.path), VerdictStatus.RUNTIME_ERROR, hash=cand.hash, format=cand.format, lang=cand.lang, sandbox=self.sandbox)
        v.compile_s = round(seconds, 4)
        v.diagnostics["build"] = {"cached": build.cached, "command": " ".join([native.CXX, *self.program.cxxflags])}
        weak = [r for w in self.workloads for r in w.weak]
        v.weak_check = bool(weak)
        if build.binary is None:
            v.status, v.reasons = VerdictStatus.COMPILE_ERROR, [build.error or "the build failed"]
            return v
        if self.timer == "instructions" and (findings := scan.client_request_findings(build.binary, channel=False)):
            return scan_rejected(v, findings, 'timer = "instructions"')
        start = time.monotonic()
        for w in self.workloads:  # every test case once, before any timing
            failure, _ = self._run_case(build.binary, w.case)
            if failure is not None:
                self._fail(v, w, failure)
                v.eval_s = round(time.monotonic() - start, 4)
                return v
        if self.timer == "instructions":
            self._count(build.binary, v)
            if v.status == VerdictStatus.FASTER:  # the counts are the candidate's; the clock is ours
                wall = second_measurement(v)
                self._time(build.binary, wall)
                v = counts_against_wall(v, wall, self.config.min_speedup)
        else:
            self._time(build.binary, v)
            if v.status == VerdictStatus.FASTER:
                again = second_measurement(v)
                self._time(build.binary, again)
                v = confirmed(v, again, "with fresh runs of both programs")
        v.eval_s = round(time.monotonic() - start, 4)
        if weak:
            v.reasons += [f"weak check: {r}" for r in weak]
        return v

    def _run_case(self, binary: Path, case: native.TestCase, cwd: Path | None = None) -> tuple[tuple[VerdictStatus, str] | None, float]:
        """((status, reason) or None, wall seconds) for one run of one test case, its output checked."""
        cwd = cwd or self._scratch
        assert cwd is not None
        failure, seconds = native.judged_run([str(binary)], case, self.config.timeout, cwd, self._sandbox)
        return (None if failure is None else (_status(failure), failure)), seconds

    def _fail(self, v: Verdict, w: TestCaseWorkload, failure: tuple[VerdictStatus, str], timed: bool = False) -> None:
        v.status = failure[0]
        v.reasons = [f"test case {w.case.input.name}{' (in a timed run)' if timed else ''}: {failure[1]}"]
        if v.status == VerdictStatus.WRONG:
            v.diagnostics["mismatch"] = {"test_case": w.case.input.name, "difference": failure[1], "timed": timed}

    def _time(self, binary: Path, v: Verdict) -> None:
        """Wall time of source and candidate, interleaved; with either timer (the instruction
        timer's cross-check is this)."""
        assert self._source_binary is not None
        samples: dict[str, tuple[list[float], list[float]]] = {w.name: ([], []) for w in self.workloads}
        cases = list(samples.values())  # the same lists, filled in place below
        budget = self.config.time_budget * len(self.workloads)
        start, rounds = time.monotonic(), 0
        bar = self.config.min_speedup
        while rounds < self.config.min_rounds or (
                rounds < self.config.max_rounds and more_time(time.monotonic() - start, budget, cases, bar)
                and not settled(cases, bar)):
            for w in self.workloads:
                ref, cand = samples[w.name]
                order = ((self._source_binary, ref), (binary, cand))
                for b, into in order if rounds % 2 == 0 else order[::-1]:
                    failure, seconds = self._run_case(b, w.case)
                    if failure is not None:
                        if b == binary:
                            return self._fail(v, w, failure, timed=True)
                        raise MaxcodeError(f"program {self.program.id}: the source failed a timed run of {w.case.input.name}: "
                                           f"{failure[1]} (is it deterministic?)")
                    into.append(seconds)
            rounds += 1
        wl_diag = {}
        for w in self.workloads:
            ref, cand = samples[w.name]
            sp = stats.speedup([(ref, cand)])
            wl_diag[w.name] = {"speedup": sp.point, "speedup_ci": [sp.low, sp.high], "reference": stats.summary(ref),
                               "candidate": stats.summary(cand), "rounds": len(ref), "calls_per_sample": 1}
        v.reference_s = stats.geomean([d["reference"]["median_s"] for d in wl_diag.values()])
        v.candidate_s = stats.geomean([d["candidate"]["median_s"] for d in wl_diag.values()])
        v.diagnostics["workloads"] = wl_diag
        decide(v, stats.speedup(cases), bar, device="cpu", timer="time")

    def _count(self, binary: Path, v: Verdict) -> None:
        """Instructions per test case under callgrind, once per binary: the counts do not vary."""
        assert self._source_binary is not None and self._scratch is not None
        per = []
        for b in (self._source_binary, binary):
            if str(b) not in self._counted:
                try:
                    self._counted[str(b)] = [native.count_instructions(b, [w.case], self.config.timeout, self._scratch, self._sandbox)
                                             for w in self.workloads]
                except native.SuiteFailure as e:
                    if b != binary:
                        raise MaxcodeError(f"program {self.program.id}: the source failed under callgrind: {e}") from None
                    v.status, v.reasons = VerdictStatus.RUNTIME_ERROR, [f"under callgrind: {e}"]
                    return
            per.append(self._counted[str(b)])
        v.diagnostics["workloads"] = {w.name: {"reference_instructions": r, "candidate_instructions": c}
                                      for w, r, c in zip(self.workloads, *per)}
        v.reference_s = v.candidate_s = None
        decide(v, stats.speedup([([r], [c]) for r, c in zip(*per)]), self.config.min_speedup, device="cpu", timer="instructions")


#: budgets a rewrite that may be faster is timed for at most while its interval is still too wide to
#: decide (the kernels get the same: timing.EXTEND_S): beside other work a process per run spreads
#: more, and the example's fast-io rewrite (1.5x) was left "too noisy to decide" after one budget
EXTEND_BUDGETS = 3.0


def more_time(elapsed: float, budget: float, samples: list[tuple[list[float], list[float]]], min_speedup: float) -> bool:
    """Whether an unsettled timing goes on: within the budget, or up to :data:`EXTEND_BUDGETS` of
    it while the point speedup so far clears the bar (a clearly slower rewrite stops at one)."""
    if elapsed < budget:
        return True
    ratios = [stats.median_ratio(ref, cand) for ref, cand in samples if ref and cand]
    return elapsed < EXTEND_BUDGETS * budget and bool(ratios) and min(ratios) > 0 and stats.geomean(ratios) >= min_speedup


def settled(samples: list[tuple[list[float], list[float]]], min_speedup: float) -> bool:
    """Whether more rounds can no longer change the verdict, so the budget's rest is saved.

    A process per run is noisy (a spread of 20 to 50% from run to run on a shared 2-core VM), so
    a handful of rounds leaves most real speedups "too noisy to decide"; rounds go on until the
    interval clears the bar with a margin, and narrowly enough for `decide` to call it faster,
    or lies wholly under it. Asymmetric like :func:`stats.decided`: a false "faster" is the
    costly error, and the confirmation measures again either way."""
    sp = stats.speedup(samples, n_boot=200)
    if sp.high < 0.98 * min_speedup:
        return True
    narrow = sp.high / sp.low <= UNDECIDED_WIDTH or sp.low >= 1.5 * min_speedup
    return sp.faster(1.1 * min_speedup) and narrow


def rerun_test_cases(program: ProgramTarget, root: Path, text: str, sandbox: str = "auto") -> tuple[bool, str]:
    """The verification of a program target's best rewrite: see ``ProgramOracle.rerun_test_cases``."""
    return ProgramOracle(program, program_config(program, 1.0, sandbox), root).rerun_test_cases(text)


def _status(failure: str) -> VerdictStatus:
    """A judge's failure as a verdict status."""
    if failure.startswith("wrong output"):
        return VerdictStatus.WRONG
    if failure.startswith("timed out"):
        return VerdictStatus.TIMEOUT
    if failure.startswith("killed by"):
        return VerdictStatus.CRASH
    if failure.startswith("output over") or (failure.startswith("wrote ") and " to its job folder " in failure):
        return VerdictStatus.REJECTED
    return VerdictStatus.RUNTIME_ERROR
