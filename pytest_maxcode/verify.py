"""Verification by the user's own tests: re-run, in a subprocess, every test that called
the target, with the candidate active; and the pytest-benchmark tests that called it,
with the reference and with the candidate in alternating runs, quoted as a ratio of
medians with a bootstrap interval over runs and rounds.

A re-run that never reached the kernel proves nothing, so the subprocess reports how
many calls the kernel served (``MAXCODE_TRACE``); zero is a failed verification.

Those processes load the candidate: they run in the run's sandbox like the oracle's workers
(DESIGN.md section 5.0), the project read-only, no network, only their own folder writable,
so a kernel cannot change the project, the report or the kernel file that apply and the bot
publish after it was verified.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .oracle.stats import runs_speedup
from .sandbox.env import scrubbed_env
from .sandbox.isolation import Limits, prepare, resolve
from .sandbox.stop import kill_group

RERUN_TIMEOUT = 1800
#: reference and candidate runs of the user's benchmarks, alternating: one pair of runs can
#: differ several-fold by chance (once 38x), and only several pairs show the spread
BENCHMARK_PAIRS = 3
#: what a copy of the project leaves out: history, maxcode's run data, caches, environments
#: (the lock and accepted kernels stay: the copy's tests run as the checkout's would)
COPY_IGNORE = (".git", ".maxcode", "__pycache__", ".pytest_cache", ".venv", "venv", ".tox", "node_modules")
#: what a re-run of the user's tests may use: their own memory needs are unknown (the oracle
#: already ran the kernel under its limits), but not an unbounded number of processes
RERUN_LIMITS = Limits(memory=None, pids=4096)


@dataclass
class TestRun:
    passed: bool
    summary: str
    kernel_calls: int = 0
    benchmarks: dict[str, dict[str, float]] = field(default_factory=dict)
    rounds: dict[str, list[float]] = field(default_factory=dict)  # per-round seconds, by benchmark


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip("= ") if lines else ""


def run_tests(root: Path, nodeids: list[str], env_extra: dict[str, str], target_id: str, benchmark: bool = False,
              sandbox: str = "auto") -> TestRun:
    """Run ``nodeids`` in a fresh pytest process, without --maxcode, with ``env_extra``, in
    the ``sandbox`` (a kind of :mod:`sandbox.isolation`) with ``root`` read-only."""
    with tempfile.TemporaryDirectory(prefix="maxcode-verify-") as tmp:
        job = Path(tmp)
        trace = job / "trace.jsonl"
        bench_json = job / "bench.json"
        env = scrubbed_env()  # user tests run a candidate too: no secrets for them either
        env.update(env_extra)
        env.update(MAXCODE_TRACE=str(trace), TMPDIR=str(job))
        args = [sys.executable, "-m", "pytest", *nodeids, "-q", "-p", "no:cacheprovider", "-o", "addopts="]
        if benchmark:
            # both sides warmed up and given enough rounds: pytest-benchmark's defaults (no
            # warm-up, a handful of rounds for ms-scale calls) measure first-call effects
            args += ["--benchmark-only", f"--benchmark-json={bench_json}", "--benchmark-warmup=on", "--benchmark-min-rounds=20"]
        cuda = sorted(Path("/dev").glob("nvidia*"))
        # the sandbox starts in its own folder: the tests run from the project's, as pytest would
        boxed = prepare(["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(root), *args], resolve(sandbox), job, RERUN_LIMITS,
                        readable=[root], devices=cuda)
        try:
            proc = subprocess.Popen(boxed.argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    errors="replace", stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                stdout, stderr = proc.communicate(timeout=RERUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.communicate()
                return TestRun(False, f"the re-run did not finish within {RERUN_TIMEOUT} s")
        finally:
            boxed.cleanup()
        calls = 0
        if trace.exists():
            for line in trace.read_text().splitlines():
                calls += int(json.loads(line).get(target_id, 0))
        run = TestRun(proc.returncode == 0, _last_line(stdout) or _last_line(stderr), calls)
        if benchmark and bench_json.exists():
            for b in json.loads(bench_json.read_text()).get("benchmarks", []):
                st = b["stats"]
                run.benchmarks[b["fullname"]] = {
                    "median_s": st["median"], "mean_s": st["mean"], "stddev_s": st["stddev"], "rounds": st["rounds"],
                }
                # per-round times (pytest-benchmark's JSON carries them); the median alone otherwise
                run.rounds[b["fullname"]] = [float(x) for x in st.get("data") or [st["median"]]]
        return run


def run_tests_with_file(root: Path, path: Path, text: str, nodeids: list[str], target_id: str, sandbox: str = "auto") -> TestRun:
    """``nodeids`` run in a copy of the project whose ``path`` holds ``text`` (a program's
    rewrite): the user's checkout is never rewritten, so an interrupted run leaves it as it was."""
    with tempfile.TemporaryDirectory(prefix="maxcode-copy-") as tmp:
        copy = Path(tmp) / root.name
        try:
            shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns(*COPY_IGNORE))
            (copy / path).write_text(text)
        except OSError as e:
            return TestRun(False, f"could not copy the project to run its tests: {e}")
        return run_tests(copy, nodeids, {}, target_id, sandbox=sandbox)


def candidate_env(target_id: str, kernel: Path, lang: str, device: str, outputs: dict[str, Any],
                  returns: str | None = None, pack: str | None = None,
                  module: Mapping[str, Any] | None = None) -> dict[str, str]:
    """What a re-run test process needs to force the candidate: an in-place kernel's ``returns``,
    how the outputs are handed back (``pack``), and a module kernel's ``module_state`` and
    ``eval_only`` (``module``), as the lock will record them: without them the dispatcher serves
    no module instance. Eight parameters because each is one field of the spec that process reads."""
    spec = {"kernel": str(kernel), "lang": lang, "device": device, "outputs": outputs}
    if returns:
        spec["returns"] = returns
    if pack:
        spec["pack"] = pack
    spec.update({k: v for k, v in (module or {}).items() if v is not None})
    return {"MAXCODE_CANDIDATES": json.dumps({target_id: spec})}


def verify(
    root: Path,
    target_id: str,
    callers: list[str],
    benchmark_callers: list[str],
    kernel: Path,
    lang: str,
    device: str,
    outputs: dict[str, Any],
    returns: str | None = None,
    pack: str | None = None,
    module: Mapping[str, Any] | None = None,
    sandbox: str = "auto",
) -> dict[str, Any]:
    """The ``tests`` and ``benchmarks`` parts of a target's report.

    Parameters because it forwards what a re-run test process needs to force the kernel (target,
    kernel, language, device, output layouts and packing, in-place return, a module's verified
    configuration) and which tests to run.
    """
    env = candidate_env(target_id, kernel, lang, device, outputs, returns, pack, module)
    plain = [n for n in callers if n not in benchmark_callers]
    tests: dict[str, Any] = {"rerun": callers, "passed": None, "summary": "", "kernel_calls": 0}
    if plain:
        run = run_tests(root, plain, env, target_id, sandbox=sandbox)
        tests.update(passed=run.passed, summary=run.summary, kernel_calls=run.kernel_calls)
        if run.passed and run.kernel_calls == 0:
            tests.update(passed=False, summary=f"{run.summary}; but no re-run test reached the kernel")
    benchmarks: list[dict[str, Any]] = []
    if benchmark_callers:
        refs, cands = [], []
        for _ in range(BENCHMARK_PAIRS):
            refs.append(run_tests(root, benchmark_callers, {"MAXCODE_DISABLE": "1"}, target_id, benchmark=True, sandbox=sandbox))
            cands.append(run_tests(root, benchmark_callers, env, target_id, benchmark=True, sandbox=sandbox))
            if not (refs[-1].passed and cands[-1].passed):
                break  # the failure is the result; more runs would only repeat it
        failed = next((r for r in (*refs, *cands) if not r.passed), None)
        ok = failed is None and all(c.kernel_calls > 0 for c in cands)
        if tests["passed"] is not False:
            tests["passed"] = ok
            summary = (failed or cands[-1]).summary
            if failed is None and not ok:
                summary = f"{summary}; but a benchmark run never reached the kernel"
            tests["summary"] = "; ".join(s for s in (tests["summary"], f"benchmarks: {summary}") if s)
        tests["kernel_calls"] += sum(c.kernel_calls for c in cands)
        benchmarks = benchmark_speedups(refs, cands)
    return {"tests": tests, "benchmarks": benchmarks}


def benchmark_speedups(refs: list[TestRun], cands: list[TestRun]) -> list[dict[str, Any]]:
    """Per benchmark: both sides' timing over all their runs, and the speedup with its interval.

    The candidate's runs loaded candidate code, which could have touched the timer: these numbers
    are the user's own view of the change and decide nothing (the verdict is the oracle's).
    """
    out = []
    for name in refs[0].benchmarks if refs else []:
        pairs = [(r.rounds[name], c.rounds[name]) for r, c in zip(refs, cands) if name in r.rounds and name in c.rounds]
        if not pairs:
            continue
        sp = runs_speedup(pairs)
        out.append({
            "name": name,
            "reference": _pooled([r for r, _ in pairs]),
            "candidate": _pooled([c for _, c in pairs]),
            "speedup": sp.point,
            "speedup_ci": [sp.low, sp.high],
            "runs": len(pairs),
        })
    return out


def _pooled(runs: list[list[float]]) -> dict[str, float]:
    values = [x for run in runs for x in run]
    return {
        "median_s": statistics.median(values),
        "mean_s": statistics.fmean(values),
        "stddev_s": statistics.stdev(values) if len(values) > 1 else 0.0,
        "rounds": len(values),
    }
