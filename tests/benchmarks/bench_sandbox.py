"""What the OS sandbox costs: per process start, per native build, per oracle start and per candidate.

Each measurement runs with no sandbox (``none``) and with the strongest this machine offers
(``auto``), and prints medians as one JSON object:

* ``per_call_ms``: start and wait for ``/bin/true`` through ``isolation.prepare`` with its
  cgroups (what a worker or a build pays once), and ``per_run_ms`` without them (rlimits
  only: what a sandboxed C++ program run pays each time).
* ``build_s``: one small C++ candidate (tests/data/chain/good.cpp) built with a cold cache.
* ``oracle_start_s``: ``Oracle.prepare`` (the worker's start, the reference's expected outputs).
* ``candidate_eval_s``: the ``eval_s`` of one checked candidate in a warm oracle.

Run it from the repository root::

    python tests/benchmarks/bench_sandbox.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pytest_maxcode.native import build  # noqa: E402
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle  # noqa: E402
from pytest_maxcode.sandbox.isolation import prepare, resolve  # noqa: E402
from pytest_maxcode.oracle.reference import parse_reference  # noqa: E402

CHAIN = ROOT / "tests" / "data" / "chain"


def per_call_ms(kind: str, runs: int, cgroups: bool = True) -> float:
    iso = resolve(kind)
    times = []
    with tempfile.TemporaryDirectory() as job:
        for _ in range(runs):
            box = prepare(["/bin/true"], iso, Path(job), use_cgroups=cgroups)
            start = time.perf_counter()
            subprocess.run(box.argv, check=True, start_new_session=True)
            times.append((time.perf_counter() - start) * 1e3)
            box.cleanup()
    return round(statistics.median(times), 2)


def build_s(kind: str | None, runs: int) -> float:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            (r,) = build.build_all([build.Source(CHAIN / "good.cpp", "cpp")], Path(cache),
                                   isolation=resolve(kind) if kind else None)
            times.append(time.perf_counter() - start)
            assert r.ok, r.errors
    return round(statistics.median(times), 3)


def oracle_s(kind: str, runs: int) -> tuple[float, float]:
    starts, evals = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            project = Path(tmp) / "chain"
            shutil.copytree(CHAIN, project)
            cand = CandidateSpec.from_path(project / "good.cpp")
            oracle = Oracle(parse_reference(str(project / "ref.py")), CheckConfig(time_budget=0.2, sandbox=kind), project)
            start = time.perf_counter()
            oracle.prepare()
            starts.append(time.perf_counter() - start)
            oracle.check([cand])  # builds it
            (v,) = oracle.check([cand])
            evals.append(v.eval_s or 0.0)
            oracle.close()
    return round(statistics.median(starts), 3), round(statistics.median(evals), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ns = ap.parse_args()
    auto = resolve("auto")
    out: dict[str, object] = {"sandbox": auto.describe()}
    out["per_call_ms"] = {"none": per_call_ms("none", ns.runs * 4), "auto": per_call_ms("auto", ns.runs * 4)}
    out["per_run_ms"] = {"none": per_call_ms("none", ns.runs * 4, False), "auto": per_call_ms("auto", ns.runs * 4, False)}
    out["build_s"] = {"unsandboxed": build_s(None, ns.runs), "auto": build_s("auto", ns.runs)}
    none_start, none_eval = oracle_s("none", max(2, ns.runs // 2))
    auto_start, auto_eval = oracle_s("auto", max(2, ns.runs // 2))
    out["oracle_start_s"] = {"none": none_start, "auto": auto_start}
    out["candidate_eval_s"] = {"none": none_eval, "auto": auto_eval}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
