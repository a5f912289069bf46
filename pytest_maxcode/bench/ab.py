"""``maxcode bench-ab BASE HEAD -- PYTEST_ARGS``: regressions measured base and head alternately.

Comparing one benchmark run of the base with one of the head, taken one after the other,
lets one burst of load on a shared runner decide the result, and treats the thousands of
rounds of one process as independent when what differs between processes (allocator,
placement, a neighbour's job) is the larger noise. So the two commits are checked out side by
side and their benchmarks run in several short processes each, alternating (ABBA ABBA ...:
a slow drift of the machine weighs on both sides alike), and each process's median is one
sample: its fastest round (see :func:`_fastest`). A benchmark regressed when a one-sided
Mann-Whitney test finds the head's runs slower than the base's by more than its threshold
(:func:`beyond`), Holm-corrected over the benchmarks.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._extras import require
from ..bot.compare import (
    ALPHA,
    DEFAULT_THRESHOLD,
    RUNS_METHOD,
    CompareResult,
    Comparison,
    Timings,
    holm,
    load_timings,
    threshold_for,
)
from ..errors import MaxcodeError
from ..sandbox.stop import kill_group
from ..tables import DEFAULT_RUNS
from .history import Processes

#: runs per side unless asked (see :data:`tables.DEFAULT_RUNS`)
RUNS = DEFAULT_RUNS
#: pytest-benchmark's seconds of rounds per benchmark that all the timed runs of one side share:
#: a quarter of its default second, because each run adds its own start, calibration and minimum
#: rounds, and all the runs of a side should cost no more than one ordinary benchmark run. A run's
#: figure is its fastest round (see :func:`_fastest`), which a few dozen rounds already give
#: (beside a hog: 0 false alarms in 60 benchmark comparisons, the 2x flagged 10 of 10 times)
SHARE = 0.25


def interleaved(repo_root: Path, base: str, head: str, pytest_args: Sequence[str], *, runs: int = RUNS,
                project: str = ".", python: str = sys.executable, timeout_s: float = 1800.0, timer: str = "time",
                progress: Callable[[str], None] | None = None,
                stored_base: Mapping[str, Sequence[float]] | None = None,
                fork_server: bool = True) -> tuple[dict[str, Timings], dict[str, Timings]]:
    """Each benchmark's per-run figures on the base and on the head, run alternately in
    worktrees of ``repo_root`` (the checkout itself is not touched); ``project`` is the
    folder inside the repository that pytest runs in. ``timer="instructions"`` counts
    instructions under callgrind instead (one run per side: the counts do not vary).
    ``stored_base``: the base's figures from a history; then only the head runs. Many
    parameters because each keyword is one option of ``maxcode bench-ab``, passed through."""
    refs = {"head": head} if stored_base is not None else {"base": base, "head": head}
    samples = measure(repo_root, refs, pytest_args, runs=runs, project=project, python=python, timeout_s=timeout_s,
                      timer=timer, progress=progress, optional=frozenset({"base"}), fork_server=fork_server)
    base_samples = {k: list(v) for k, v in stored_base.items()} if stored_base is not None else samples["base"]
    return _timings(base_samples), _timings(samples["head"])


def measure(repo_root: Path, refs: Mapping[str, str], pytest_args: Sequence[str], *, runs: int = RUNS, project: str = ".",
            python: str = sys.executable, timeout_s: float = 1800.0, timer: str = "time",
            progress: Callable[[str], None] | None = None,
            optional: frozenset[str] = frozenset(), fork_server: bool = True) -> dict[str, dict[str, list[float]]]:
    """Per side (``refs``: side name -> commit), each benchmark's figure per process, the
    sides' processes alternating ABBA... (a slow drift of the machine weighs on all alike).
    An ``optional`` side (the base) that lacks the project folder or collects no benchmark
    has none: a pull request that adds the first benchmarks is not an error. ``fork_server``:
    fork each timed run from a server per side that collected once (see :class:`_Runs`); else a
    new interpreter per run.
    Many parameters because each keyword is one option of ``bench-ab`` / ``bench-record``."""
    if timer not in ("time", "instructions"):
        raise MaxcodeError(f"bench-ab: --timer {timer!r}: expected time or instructions")
    counting = _Counting(Path(repo_root)) if timer == "instructions" else None
    runs = 1 if counting else runs
    if runs < 2 and not counting:
        raise MaxcodeError("bench-ab: --runs must be at least 2 (each process is one sample)")
    repo = _repo(repo_root)
    for ref in refs.values():
        commit_of(repo, ref)
    samples: dict[str, dict[str, list[float]]] = {side: {} for side in refs}
    # one hash seed for every process of both sides: hashing is then no difference between them
    seed = str(random.randrange(2**32))
    with tempfile.TemporaryDirectory(prefix="maxcode-ab-") as tmp, contextlib.ExitStack() as servers:
        trees = {side: Path(tmp) / side for side in refs}
        try:
            for side, ref in refs.items():
                repo.git.worktree("add", "--detach", str(trees[side]), ref)
            order = [side for side in refs if not _absent(trees[side] / project, side, side in optional, progress)]
            runners: dict[str, _Runs] = {}
            for side in order:
                runners[side] = _Runs(python, trees[side], project, pytest_args, side, counting, seed,
                                      fork_server=fork_server and counting is None)
                servers.callback(runners[side].close)
            for i in range(runs):
                for side in (order if i % 2 == 0 else order[::-1]):
                    if progress:
                        progress(f"bench-ab: run {i + 1}/{runs} of {side}")
                    out = Path(tmp) / f"{side}-{i}.json"
                    runners[side].run(out, timeout_s, None if counting else SHARE / runs)
                    for name, seconds in _fastest(out).items():
                        samples[side].setdefault(name, []).append(seconds)
        finally:
            servers.close()
            for path in trees.values():
                if path.exists():
                    repo.git.worktree("remove", "--force", str(path))
            repo.close()  # GitPython's cat-file processes end with it, not when it is collected
    return samples


def processes(timer: str, fork_server: bool) -> Processes:
    """The kind of process asked for, as a history records it: counted runs always start afresh,
    and a side whose collection initialises torch's CUDA runs new interpreters either way, so
    the same project and options always give the same label."""
    return "forked" if fork_server and timer == "time" else "fresh"


def _absent(cwd: Path, side: str, optional: bool, progress: Callable[[str], None] | None) -> bool:
    if cwd.is_dir() or not optional:
        return False
    if progress:
        progress(f"bench-ab: {cwd.name!r} does not exist on the {side}: every benchmark counts as new")
    return True


def _repo(repo_root: Path) -> Any:
    git = require("git", "maxcode bench-ab")
    try:
        return git.Repo(repo_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise MaxcodeError(f"bench-ab: {repo_root} is not in a git repository") from None


def commit_of(repo: Any, ref: str) -> str:
    """The full hash ``ref`` names, or a one-line error."""
    git = require("git", "maxcode bench-ab")
    try:
        return str(repo.commit(ref).hexsha)
    except (git.BadName, ValueError):
        raise MaxcodeError(f"bench-ab: {ref!r} is not a commit in {repo.working_tree_dir} (fetch it first?)") from None


def resolve_commit(repo_root: Path, ref: str) -> str:
    return commit_of(_repo(repo_root), ref)


class _Counting:
    """What a pytest run needs to count instructions: valgrind, the built callgrind shim."""

    def __init__(self, root: Path) -> None:
        # the compiler driver: only this mode needs it, which keeps start-up fast
        from ..native import build

        if shutil.which("valgrind") is None:
            raise MaxcodeError("bench-ab --timer instructions needs valgrind on the PATH (e.g. apt-get install valgrind)")
        shim = build.build_all([build.Source(build.CALLGRIND_SHIM, "cpp")], root / ".maxcode" / "build", cxxflags=["-O2"])[0]
        if not shim.ok:
            raise MaxcodeError(f"bench-ab --timer instructions: cannot build the callgrind shim: {' '.join(shim.errors)[:300]}")
        self.shim = str(build.verified_library(shim))

    def wrap(self, argv: list[str], out: Path, env: dict[str, str]) -> list[str]:
        """Under callgrind, uninstrumented until the first counted call; pytest-benchmark off,
        the counting fixture on."""
        cg_dir = out.with_suffix(".cg")
        cg_dir.mkdir()
        env.update(MAXCODE_CALLGRIND_SHIM=self.shim, MAXCODE_CALLGRIND_DIR=str(cg_dir), PYTHONHASHSEED="0")
        pytest_args = [a for a in argv[3:] if not a.startswith(("--benchmark-only", "--benchmark-json"))]
        return [*_no_aslr(), "valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--dump-instr=no",
                "--dump-line=no", f"--callgrind-out-file={cg_dir}/cg.%p", f"--log-file={cg_dir}/valgrind.%p.log",
                *argv[:3], *pytest_args, "-p", "no:benchmark", "-p", "pytest_maxcode.bench.counting",
                f"--maxcode-count-json={out}"]


@functools.cache
def _no_aslr() -> tuple[str, ...]:
    """``setarch ARCH -R``, where it works: with addresses the same in every run, what the
    allocator and hashing by address do is too (quiet, 12 of 12 counts of an unchanged
    benchmark agreed exactly with it, 10 of 12 without). Containers whose seccomp profile
    refuses the personality call count without it."""
    argv = ("setarch", platform.machine(), "-R")
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return argv if ok else ()


class _Runs:
    """One side's pytest processes: by default, runs forked by a server that started pytest and
    collected the tests once (``_pytest_forkserver.py``), so that start-up is paid once per side,
    not once per run; else a new interpreter per run. Beside two busy processes on the 2-core
    VM (tests/benchmarks/bench_regressions.py, the modes taking turns, 2026-11-28): forked, 0
    false changes in 30 benchmark comparisons of identical code and 8.8 s a comparison, 0.75
    times the old base-then-head pair; new interpreters, 0 in 30 and 22.1 s. An earlier
    measurement (2026-11-26) found forked runs noisier, judged by a t-test; the machine's own
    slow and fast spells, which both modes see, were the larger noise there and then
    (tests/benchmarks/ab_modes.py, the same day: sd of the change 0.050 forked, 0.093 fresh).
    Counted runs start afresh under valgrind, as counting needs."""

    def __init__(self, python: str, tree: Path, project: str, pytest_args: Sequence[str], side: str,
                 counting: _Counting | None, seed: str, *, fork_server: bool = True) -> None:
        """Eight parameters because they are the side's part of :func:`measure`'s options."""
        self.cwd, self.side, self.counting = tree / project, side, counting
        if not self.cwd.is_dir():
            raise MaxcodeError(f"bench-ab: {project!r} does not exist on the {side} commit (check --project)")
        self.python, self.pytest_args = python, list(pytest_args)
        # not an xdist worker's variables: pytest-benchmark would take the run for a worker and turn itself off
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
        self.env["PYTHONHASHSEED"] = seed
        # this side's own modules before any installed (editable) copy of the project
        front = [str(self.cwd / "src")] if (self.cwd / "src").is_dir() else []
        self.env["PYTHONPATH"] = os.pathsep.join([*front, str(self.cwd), *filter(None, [self.env.get("PYTHONPATH")])])
        self.server: subprocess.Popen[bytes] | None = None
        self.forked = True  # until the server says it could not fork
        if fork_server:
            self.server_log = tree.parent / f"{side}-server.log"
            with open(self.server_log, "wb") as log:
                self.server = subprocess.Popen(
                    [python, str(Path(__file__).with_name("_pytest_forkserver.py")), str(tree), json.dumps(self.pytest_args)],
                    cwd=self.cwd, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    start_new_session=True)

    def close(self) -> None:
        if self.server is None:
            return
        with contextlib.suppress(OSError):
            self.server.stdin.close()  # type: ignore[union-attr]
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(self.server)

    def run(self, out: Path, timeout_s: float, share: float | None) -> None:
        """One pytest process; ``share``: its part of pytest-benchmark's default second per
        benchmark, so that all the runs of a side cost about one ordinary benchmark run."""
        argv = [*self.pytest_args, "--benchmark-only", f"--benchmark-json={out}", "-q", "-p", "no:cacheprovider"]
        if share and not any(a.startswith("--benchmark-max-time") for a in self.pytest_args):
            argv.insert(len(self.pytest_args), f"--benchmark-max-time={share:.3g}")
        log = out.with_suffix(".log")
        rc = self._served(argv, log, timeout_s) if self.server else self._fresh(argv, out, log, timeout_s)
        if self.server and not self.forked:
            # it ran that one as a new interpreter (collecting initialised torch's CUDA, which a forked
            # child cannot use): the rest start afresh from here, and the server, which holds that
            # CUDA context and its memory, goes now rather than beside the side's GPU benchmarks
            self.close()
            self.server = None
        if rc == 5:  # pytest collected no benchmark here
            out.write_text('{"benchmarks": []}')
        if rc not in (0, 5) or not out.exists():
            raise MaxcodeError(f"bench-ab: pytest failed on the {self.side} (exit {rc}): {_last_line(log)[:200]}")

    def _served(self, argv: list[str], log: Path, timeout_s: float) -> int:
        server = self.server
        assert server is not None and server.stdin is not None and server.stdout is not None
        try:
            server.stdin.write((json.dumps({"argv": argv, "log": str(log)}) + "\n").encode())
            server.stdin.flush()
        except OSError:
            pass  # it has gone: its log says why, below
        ready, _, _ = select.select([server.stdout], [], [], timeout_s)
        if not ready:
            kill_group(server)
            raise self._too_slow(timeout_s)
        answer = server.stdout.readline()
        if not answer:
            raise MaxcodeError(f"bench-ab: pytest stopped on the {self.side} before running: {_last_line(self.server_log)[:200]}")
        reply = json.loads(answer)
        self.forked = bool(reply.get("forked", True))
        return int(reply["rc"])

    def _fresh(self, argv: list[str], out: Path, log: Path, timeout_s: float) -> int:
        command = [self.python, "-m", "pytest", *argv]
        env = dict(self.env)
        if self.counting is not None:
            command = self.counting.wrap(command, out, env)
        try:
            with open(log, "wb") as sink:
                return subprocess.run(command, cwd=self.cwd, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s,
                                      stdin=subprocess.DEVNULL, env=env, check=False).returncode
        except subprocess.TimeoutExpired:
            raise self._too_slow(timeout_s) from None

    def _too_slow(self, timeout_s: float) -> MaxcodeError:
        return MaxcodeError(f"bench-ab: the {self.side}'s benchmarks did not finish within {timeout_s:.0f} s")


def _last_line(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "no output"
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")


def _fastest(path: Path) -> dict[str, float]:
    """Each benchmark's fastest round in one process: rounds only get slower when other work
    takes the CPU (a time slice lost inside a round), so on a shared runner the minimum is
    the process's most repeatable figure; what differs between processes the runs show."""
    timings = load_timings(path)  # checks the file's shape, with one-line errors
    fastest = {str(b["fullname"]): b["stats"].get("min") for b in json.loads(path.read_text())["benchmarks"]}
    return {name: float(fastest.get(name) or t.median_s) for name, t in timings.items()}


def _timings(per_run: Mapping[str, list[float]]) -> dict[str, Timings]:
    out = {}
    for name, xs in per_run.items():
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        out[name] = Timings(name, statistics.median(xs), statistics.fmean(xs), sd, len(xs), list(xs))
    return out


def judge(base: Mapping[str, Timings], head: Mapping[str, Timings], *, threshold: float = DEFAULT_THRESHOLD,
          thresholds: Mapping[str, float] | None = None, base_label: str = "base", head_label: str = "head",
          timer: str = "time") -> CompareResult:
    """Regressed / improved / unchanged per benchmark, from per-run figures (``Timings.data``);
    seven parameters because its keywords mirror :func:`bot.compare.compare`'s.
    Instruction counts are deterministic: the threshold alone decides them."""
    if timer == "instructions":
        return _judge_counts(base, head, threshold, thresholds, base_label, head_label)
    stats = require("scipy.stats", "maxcode bench-ab")  # loads in a second: only when judging

    result = CompareResult(base_label, head_label, only_base=sorted(set(base) - set(head)), only_head=sorted(set(head) - set(base)))
    raw_p: list[float] = []
    for name in sorted(set(base) & set(head)):
        b, h = base[name], head[name]
        lb = [math.log(max(x, 1e-18)) for x in b.data or [b.median_s]]
        lh = [math.log(max(x, 1e-18)) for x in h.data or [h.median_s]]
        change = h.median_s / max(b.median_s, 1e-18) - 1.0
        limit = threshold_for(name, threshold, thresholds or {})
        c = Comparison(name, b.median_s, h.median_s, change, _change_interval(lb, lh), limit, RUNS_METHOD)
        raw_p.append(beyond(lb, lh, math.log1p(limit) if change >= 0 else -math.log1p(limit), stats.mannwhitneyu))
        result.comparisons.append(c)
    for c, p in zip(result.comparisons, holm(raw_p)):
        c.p_value = p
        c.significant = p < ALPHA
        if c.significant and c.change > c.threshold:
            c.verdict = "regressed"
        elif c.significant and c.change < -c.threshold:
            c.verdict = "improved"
    return result


def beyond(lb: Sequence[float], lh: Sequence[float], margin: float, mannwhitneyu: Callable[..., Any]) -> float:
    """The one-sided p-value that the head's log figures exceed the base's by more than
    ``margin`` (below it, for a negative margin: an improvement): Mann-Whitney on the head's
    figures moved back by the margin. Beyond the threshold, not merely different: a test of "any
    change" that then asks the medians to differ by the threshold called identical code slower in
    about 5% of comparisons on a loaded VM, where one process's figure differs from the next by
    about 0.11 (sd of the log) with tails to +50%, which also bends a t-test; ranks do not mind
    the tails (tests/benchmarks/bench_regressions.py measures it)."""
    if min(len(lb), len(lh)) < 2:
        return 1.0
    moved = [x - margin for x in lh]
    p = float(mannwhitneyu(moved, list(lb), alternative="greater" if margin >= 0 else "less").pvalue)
    return p if math.isfinite(p) else 1.0


def _judge_counts(base: Mapping[str, Timings], head: Mapping[str, Timings], threshold: float,
                  thresholds: Mapping[str, float] | None, base_label: str, head_label: str) -> CompareResult:
    result = CompareResult(base_label, head_label, only_base=sorted(set(base) - set(head)), only_head=sorted(set(head) - set(base)))
    for name in sorted(set(base) & set(head)):
        b, h = base[name].median_s, head[name].median_s
        change = h / max(b, 1e-18) - 1.0
        c = Comparison(name, b, h, change, None, threshold_for(name, threshold, thresholds or {}), "instructions", significant=True)
        c.verdict = "regressed" if change > c.threshold else "improved" if change < -c.threshold else "unchanged"
        result.comparisons.append(c)
    return result


def _change_interval(lb: Sequence[float], lh: Sequence[float]) -> list[float] | None:
    """A 95% interval of head/base - 1 that matches the rank test: the Hodges-Lehmann one, the
    order statistics of all head-minus-base differences of the log figures that the
    Mann-Whitney U distribution puts 2.5% beyond each end (exact, by counting; no normal
    approximation at a handful of runs a side). It lies above the threshold exactly when the
    test of :func:`beyond` rejects at 2.5%. At under four runs a side no such interval exists
    (the smallest p-value is over 2.5%): then the whole range of the differences."""
    if min(len(lb), len(lh)) < 2:
        return None
    diffs = sorted(h - b for h in lh for b in lb)
    k = max(_u_quantile(len(lb), len(lh), 0.025) - 1, 0)
    lo, hi = diffs[k], diffs[len(diffs) - 1 - k]
    return [math.expm1(lo), math.expm1(hi)]


@functools.cache
def _u_quantile(m: int, n: int, tail: float) -> int:
    """The largest k with P(U < k) <= tail under the null (U: Mann-Whitney's count of pairs),
    by counting the rank arrangements; 0 when even P(U = 0) is over the tail."""
    # ways[u]: arrangements of i base and j head ranks with u (head, base) pairs where head is
    # above, built up one rank at a time (the textbook recurrence)
    table = {(0, 0): [1]}
    for i in range(m + 1):
        for j in range(n + 1):
            if i == j == 0:
                continue
            a = table.get((i - 1, j), [0]) if i else [0]
            b = [0] * i + table.get((i, j - 1), [0]) if j else [0]
            size = max(len(a), len(b))
            table[(i, j)] = [(a[u] if u < len(a) else 0) + (b[u] if u < len(b) else 0) for u in range(size)]
    ways = table[(m, n)]
    total = math.comb(m + n, m)
    k, below = 0, 0
    while k < len(ways) and (below + ways[k]) / total <= tail:
        below += ways[k]
        k += 1
    return k
