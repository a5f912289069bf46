"""What the trusted clock costs and whether it stays honest (issue 13's benchmark).

Prints one JSON object:

* ``ring_overhead_us``: the trusted side's time around one served call of a kernel that does
  (almost) nothing: a sandboxed candidate copying 4 floats, rung over shared memory, and the
  call path the worker used ("compiled": native/callpath.cpp; else ctypes and why); per side
  (the candidate's includes its wake-up from the freeze, the reference's does not). ``warm``
  (the target's figure): after each warm-up round of a check, :data:`WARM_RINGS` more rings of
  one call on the same server, per side; ``first``: the warm-up rounds themselves, the first
  calls of a fresh server process (cold code, first calls into the kernel's library, first
  touches of the slots), which the oracle's warm-up rounds exist to absorb.
  ``--ring-only`` prints just this (seconds, where the rest takes minutes). ``keeper``: per
  core, the candidate's thaws its keeper made (``took``) and those the timer made after
  passing it over (``passed``; oracle/keeper.py).
* ``batch20``: wall seconds for ``Oracle.check`` of 20 candidates (the chain problem's honest
  kernel, renamed so none is a cache hit), per candidate, with this checkout and, when
  ``--baseline DIR`` names another checkout (e.g. ``git worktree add /tmp/base <rev>``), with it.
* ``aa``: the reference checked against itself ``--aa-runs`` times (default 50): how many were
  called ``faster`` (must be 0), the median speedup, how many intervals cover 1.

Run from the repository root::

    python tests/benchmarks/bench_trusted_clock.py [--baseline DIR] [--aa-runs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "tests" / "data" / "chain"

COPY_REF = '''
import torch


def f(x):
    return x.clone()


def get_inputs():
    return [torch.randn(4)]
'''

COPY_KERNEL = r'''
#include <dlpack/dlpack.h>
#include <cstdint>
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  for (int i = 0; i < 4; ++i) y[i] = x[i];
  return 0;
}
'''

RING_PROBE = r'''
import json, sys
from pathlib import Path
import pytest_maxcode.oracle.timing as T
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

first, warm = {}, {}
orig = T._Side.timed
def timed(self, n, part, spin_s, probe, stage, freeze=None):
    dt, words = orig(self, n, part, spin_s, probe, stage, freeze)
    if n == 1:
        first.setdefault(self.name, []).append(dt)
        warm.setdefault(self.name, []).extend(orig(self, n, part, spin_s, probe, stage, freeze)[0] for _ in range(int(sys.argv[3])))
    return dt, words
T._Side.timed = timed
root = Path(sys.argv[1])
ref = parse_reference(str(root / "ref.py") + ":f", str(root / "ref.py") + ":get_inputs")
with Oracle(ref, CheckConfig(time_budget=0.05), root) as o:
    for _ in range(int(sys.argv[2])):
        o.check([CandidateSpec.from_path(root / "copy.cpp")])
    call_path = o.zygote.info.get("call_path", "ctypes (before the compiled call path)")
try:
    from pytest_maxcode.oracle import keeper as K
    keepers = {k.cpu: {"took": k.took, "passed": k.passed} for k in K._KEEPERS.values()}
except ImportError:  # a checkout before the keeper
    keepers = {}
print(json.dumps({"first": first, "warm": warm, "call_path": call_path, "keeper": keepers}))
'''

#: rings of one call repeated on the same server after each warm-up round
WARM_RINGS = 20

BATCH_PROBE = r'''
import json, sys, time
from pathlib import Path
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

root = Path(sys.argv[1])
cands = [CandidateSpec.from_path(p) for p in sorted(root.glob("cand_*.cpp"))]
ref = parse_reference(str(root / "ref.py"), None)
with Oracle(ref, CheckConfig(), root) as o:
    o.check(cands[:1])  # the worker and the build toolchain warm
    start = time.monotonic()
    vs = o.check(cands[1:])
    wall = time.monotonic() - start
print(json.dumps({"wall_s": wall, "n": len(cands) - 1, "statuses": [v.status for v in vs]}))
'''


def _run(code: str, args: list[str], pythonpath: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    out = subprocess.run([sys.executable, "-c", code, *args], check=False, capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"probe failed: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def ring_overhead(checks: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="maxcode-bench-") as d:
        root = Path(d)
        (root / "ref.py").write_text(COPY_REF)
        (root / "copy.cpp").write_text(COPY_KERNEL)
        out = json.loads(_run(RING_PROBE, [str(root), str(checks), str(WARM_RINGS)], ROOT))
    # per side: the reference's server is rung while it runs; the candidate's is thawed right
    # before its clock starts (it arms before its inputs exist), so its figure holds that wake-up
    return {side: {"warm": _quantiles(out["warm"][side]), "first": _quantiles(out["first"][side])} for side in out["warm"]} | {
        "call_path": out["call_path"], "keeper": out.get("keeper", {})}


def _quantiles(values: list[int]) -> dict[str, float]:
    """Median, p90, p99, min and max of nanosecond figures, in µs (the tail shows a stalled thaw)."""
    ns = sorted(values)
    return {"median": ns[len(ns) // 2] / 1e3, "p90": ns[int(0.9 * len(ns))] / 1e3, "p99": ns[int(0.99 * len(ns))] / 1e3,
            "min": ns[0] / 1e3, "max": ns[-1] / 1e3, "rings": len(ns)}


def batch(checkout: Path, n: int = 21) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="maxcode-bench-") as d:
        root = Path(d)
        shutil.copy(CHAIN / "ref.py", root / "ref.py")
        text = (CHAIN / "good.cpp").read_text()
        for i in range(n):
            (root / f"cand_{i:02d}.cpp").write_text(f"{text}\n// variant {i}\n")
        r = json.loads(_run(BATCH_PROBE, [str(root)], checkout))
    return {"wall_s": round(r["wall_s"], 2), "per_candidate_s": round(r["wall_s"] / r["n"], 3),
            "faster": r["statuses"].count("faster"), "n": r["n"]}


def aa(runs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="maxcode-bench-") as d:
        root = Path(d)
        for name in ("ref.py", "same_as_reference.py"):
            shutil.copy(CHAIN / name, root / name)
        out = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py", *["same_as_reference.py"] * runs,
                              "--json", "--time-budget", "0.15"], check=False, cwd=root, capture_output=True, text=True, timeout=3600)
        verdicts = json.loads(out.stdout)
    speedups = sorted(v["speedup"] for v in verdicts if v["speedup"] is not None)
    return {
        "runs": len(verdicts),
        "false_faster": sum(v["status"] == "faster" for v in verdicts),
        "median_speedup": speedups[len(speedups) // 2] if speedups else None,
        "cover_1": sum(v["speedup_ci"] is not None and v["speedup_ci"][0] <= 1.0 <= v["speedup_ci"][1] for v in verdicts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="another checkout to time the batch of 20 with")
    ap.add_argument("--aa-runs", type=int, default=50)
    ap.add_argument("--checks", type=int, default=5, help="checks of the copy kernel for the ring overhead")
    ap.add_argument("--ring-only", action="store_true", help="only the ring overhead")
    ns = ap.parse_args()
    load = os.getloadavg()[0]
    result: dict[str, object] = {"cpus": os.cpu_count(), "load_1min_before": round(load, 2)}
    result["ring_overhead_us"] = ring_overhead(ns.checks)
    if ns.ring_only:
        result["load_1min_after"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result, indent=2))
        return
    result["batch20"] = {"this": batch(ROOT)}
    if ns.baseline:
        result["batch20"]["baseline"] = batch(ns.baseline)  # type: ignore[index]
        this, base = result["batch20"]["this"], result["batch20"]["baseline"]  # type: ignore[index]
        result["batch20"]["ratio"] = round(this["per_candidate_s"] / base["per_candidate_s"], 2)  # type: ignore[index]
    result["aa"] = aa(ns.aa_runs)
    result["load_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"# {time.monotonic() - start:.0f} s", file=sys.stderr)
