"""Benchmark of ``maxcode check``: the native batch path against the compat (load_inline) path.

What it measures, each with a cold build cache (a fresh temporary directory as the working
directory, so ``.maxcode/`` starts empty):

* ``native_batch``: wall time of ONE ``maxcode check ref.py c00.cpp ... c19.cpp --json`` call
  on 20 distinct native C++ candidates of the same fused kernel (real variants: loop order,
  OpenMP schedule, manual unrolling, column tiling), plus the verdicts' statuses, speedups and
  the sums of their ``compile_s`` and ``eval_s``.
* ``compat_load_inline``: wall time of one ``maxcode check ref.py compat.py --json`` call, where
  ``compat.py`` builds the same fused kernel with ``torch.utils.cpp_extension.load_inline``.
* ``aa``: the A/A check, a compat candidate whose ``ModelNew`` is the reference itself,
  evaluated N times in one call; how many verdicts say "faster" (should be 0) and the spread
  of the speedups.
* ``ratio``: compat seconds / native seconds per candidate.

The reference is tests/data/chain/ref.py (y = relu(2x + b)^2 - 0.5) with its inputs enlarged
(``--rows`` x ``--cols``, default 512 x 1024) so that the kernel's work is meaningful.

Run it from the repository root (it prints one JSON object on stdout)::

    python tests/benchmarks/bench_check.py [--aa-runs 50] [--skip-compat] [--skip-aa]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHAIN = HERE.parent / "data" / "chain"

# ----------------------------------------------------------------------------- sources

HEADER = """\
// variant {tag}
#include <dlpack/dlpack.h>
#include <cmath>
#include <cstdint>

static inline float chain(float x, float b) {{
  float v = x * 2.0f + b;
  {relu}
  return v * v - 0.5f;
}}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {{
  if (n_in != 2 || n_out != 1) return 1;
  const float* __restrict x = static_cast<const float*>(in[0].data);
  const float* __restrict b = static_cast<const float*>(in[1].data);
  float* __restrict y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
{body}
  return 0;
}}
"""

RELU = {
    "ternary": "v = v < 0.f ? 0.f : v;",
    "fmax": "v = std::fmax(v, 0.f);",
}

# rows in parallel, the inner loop vectorized; schedule chunk varies
ROWS_SIMD = """\
#pragma omp parallel for schedule({schedule})
  for (int64_t r = 0; r < rows; ++r) {{
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = chain(xr[c], b[c]);
  }}"""

# one flat loop over every element; the bias index is recovered per element
FLAT = """\
  const int64_t n = rows * cols;
#pragma omp parallel for schedule({schedule})
  for (int64_t i = 0; i < n; ++i) y[i] = chain(x[i], b[i % cols]);"""

# rows in parallel, the inner loop unrolled by hand, with a remainder loop
UNROLLED = """\
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {{
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    int64_t c = 0;
    for (; c + {u} <= cols; c += {u}) {{
{lanes}
    }}
    for (; c < cols; ++c) yr[c] = chain(xr[c], b[c]);
  }}"""

# column tiles outer (bias tile stays in L1), rows inner, both parallel
TILED = """\
  const int64_t tile = {t};
  const int64_t n_tiles = (cols + tile - 1) / tile;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < n_tiles; ++t) {{
    for (int64_t r = 0; r < rows; ++r) {{
      const int64_t c0 = t * tile, c1 = c0 + tile < cols ? c0 + tile : cols;
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) yr[c] = chain(xr[c], b[c]);
    }}
  }}"""


def native_variants(n: int) -> dict[str, str]:
    """``n`` genuinely different native candidates (distinct kernels, not just comments)."""
    specs: list[tuple[str, str, str]] = []  # (tag, relu, body)
    for sched in ("static", "static, 1", "static, 4", "static, 16", "dynamic, 8"):
        specs.append((f"rows-simd schedule({sched})", "ternary", ROWS_SIMD.format(schedule=sched)))
    for sched in ("static", "static, 1024", "static, 4096", "static, 16384", "guided"):
        specs.append((f"flat schedule({sched})", "fmax", FLAT.format(schedule=sched)))
    for u, relu in ((2, "ternary"), (4, "ternary"), (8, "ternary"), (16, "ternary"), (4, "fmax")):
        lanes = "\n".join(f"      yr[c + {k}] = chain(xr[c + {k}], b[c + {k}]);" for k in range(u))
        specs.append((f"unrolled x{u} relu={relu}", relu, UNROLLED.format(u=u, lanes=lanes)))
    for t in (64, 128, 256, 512, 1024):
        specs.append((f"tiled {t}", "fmax" if t % 256 == 0 else "ternary", TILED.format(t=t)))
    # more than 20 asked for: cross the bodies with the other relu spelling
    extra = [(tag + " alt-relu", "fmax" if relu == "ternary" else "ternary", body) for tag, relu, body in specs]
    out = {}
    for i, (tag, relu, body) in enumerate(itertools.islice(itertools.chain(specs, extra), n)):
        out[f"c{i:02d}.cpp"] = HEADER.format(tag=tag, relu=RELU[relu], body=body)
    if len(out) < n:
        raise SystemExit(f"only {len(out)} distinct native variants are defined; ask for fewer")
    return out


COMPAT = '''\
"""Compat candidate: the same fused chain, built with torch.utils.cpp_extension.load_inline."""

import torch
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor fused_chain(torch::Tensor x, torch::Tensor b) {
  TORCH_CHECK(x.dim() == 2 && b.dim() == 1 && x.scalar_type() == torch::kFloat32);
  auto xc = x.contiguous();
  auto bc = b.contiguous();
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * cols;
      float* yr = yp + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        float v = xr[c] * 2.0f + bp[c];
        v = v < 0.f ? 0.f : v;
        yr[c] = v * v - 0.5f;
      }
    }
  });
  return y;
}
"""

_ext = load_inline(
    name="fused_chain_ext",
    cpp_sources=[_SRC],
    functions=["fused_chain"],
    extra_cflags=["-O3", "-march=native"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        return _ext.fused_chain(x, bias)
'''


def reference_source(rows: int, cols: int) -> str:
    """tests/data/chain/ref.py with its input shapes replaced by rows x cols."""
    text = (CHAIN / "ref.py").read_text()
    new = re.sub(
        r"torch\.randn\(\s*\d+\s*,\s*\d+\s*\),\s*torch\.randn\(\s*\d+\s*\)",
        f"torch.randn({rows}, {cols}), torch.randn({cols})",
        text,
    )
    if new == text and (rows, cols) != (64, 1024):
        raise SystemExit("could not resize the inputs of tests/data/chain/ref.py; has its get_inputs changed?")
    return new


# ----------------------------------------------------------------------------- running


ENV: dict[str, str] | None = None  # the environment of every 'maxcode check' call (None: ours)


def run_check(workdir: Path, files: list[str], extra: list[str]) -> dict:
    """One ``maxcode check`` call in ``workdir``; its wall time and its parsed verdicts."""
    cmd = [sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py", *files, "--json", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - start
    try:
        verdicts = json.loads(proc.stdout) if proc.stdout.strip() else []
    except json.JSONDecodeError:
        verdicts = []
    result = {"wall_s": round(wall, 3), "exit_code": proc.returncode, "verdicts": verdicts}
    if proc.returncode not in (0, 1) or not verdicts:
        result["stderr_tail"] = proc.stderr[-3000:]
    return result


def fresh_dir(parent: Path, name: str, ref_text: str) -> Path:
    d = parent / name
    d.mkdir()
    (d / "ref.py").write_text(ref_text)
    return d


def _sum(values) -> float:
    return round(sum(v for v in values if v is not None), 3)


def _statuses(verdicts: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in verdicts:
        out[v["status"]] = out.get(v["status"], 0) + 1
    return out


def _problems(verdicts: list[dict]) -> list[dict]:
    """The verdicts that are not correct, with what they say went wrong."""
    bad = []
    for v in verdicts:
        if v["status"] not in ("faster", "not_faster"):
            bad.append(
                {
                    "candidate": os.path.basename(v["candidate"]),
                    "status": v["status"],
                    "reasons": v.get("reasons", [])[:3],
                    "traceback_tail": (v.get("diagnostics", {}).get("traceback") or "")[-1500:] or None,
                    "output_tail": (v.get("diagnostics", {}).get("output") or "")[-1500:] or None,
                }
            )
    return bad


def bench_native(parent: Path, ref_text: str, n: int, extra: list[str]) -> dict:
    d = fresh_dir(parent, "native", ref_text)
    sources = native_variants(n)
    for name, text in sources.items():
        (d / name).write_text(text)
    res = run_check(d, list(sources), extra)
    vs = res["verdicts"]
    out = {
        "n_candidates": n,
        "distinct_sources": len(set(sources.values())),
        "total_s": res["wall_s"],
        "per_candidate_s": round(res["wall_s"] / n, 3),
        "exit_code": res["exit_code"],
        "statuses": _statuses(vs),
        "compile_s_sum": _sum(v.get("compile_s") for v in vs),
        "eval_s_sum": _sum(v.get("eval_s") for v in vs),
        # startup (two torch imports), the reference's run, the parallel builds, the bandwidth probe
        "non_eval_s": round(res["wall_s"] - _sum(v.get("eval_s") for v in vs), 3),
        "build_cached": sum(1 for v in vs if v.get("diagnostics", {}).get("build", {}).get("cached")),
        "candidates": [
            {
                "candidate": os.path.basename(v["candidate"]),
                "variant": sources.get(os.path.basename(v["candidate"]), "").splitlines()[0][len("// variant ") :],
                "status": v["status"],
                "speedup": v.get("speedup"),
                "speedup_ci": v.get("speedup_ci"),
                "reference_s": v.get("reference_s"),
                "candidate_s": v.get("candidate_s"),
                "compile_s": v.get("compile_s"),
                "eval_s": v.get("eval_s"),
            }
            for v in vs
        ],
    }
    if _problems(vs):
        out["problems"] = _problems(vs)
    if "stderr_tail" in res:
        out["stderr_tail"] = res["stderr_tail"]
    return out


def bench_compat(parent: Path, ref_text: str, extra: list[str]) -> dict:
    d = fresh_dir(parent, "compat", ref_text)
    (d / "compat.py").write_text(COMPAT)
    res = run_check(d, ["compat.py"], extra)
    vs = res["verdicts"]
    v = vs[0] if vs else {}
    out = {
        "total_s": res["wall_s"],
        "exit_code": res["exit_code"],
        "status": v.get("status"),
        "speedup": v.get("speedup"),
        "speedup_ci": v.get("speedup_ci"),
        "reference_s": v.get("reference_s"),
        "candidate_s": v.get("candidate_s"),
        "compile_s": v.get("compile_s"),
        "eval_s": v.get("eval_s"),
    }
    if _problems(vs):
        out["problems"] = _problems(vs)
    if "stderr_tail" in res:
        out["stderr_tail"] = res["stderr_tail"]
    return out


def bench_aa(parent: Path, ref_text: str, runs: int, extra: list[str]) -> dict:
    d = fresh_dir(parent, "aa", ref_text)
    shutil.copy(CHAIN / "same_as_reference.py", d / "same_as_reference.py")
    res = run_check(d, ["same_as_reference.py"] * runs, extra)
    vs = res["verdicts"]
    speedups = [v["speedup"] for v in vs if v.get("speedup") is not None]
    lows = [v["speedup_ci"][0] for v in vs if v.get("speedup_ci")]
    out = {
        "runs": runs,
        "verdicts": len(vs),
        "total_s": res["wall_s"],
        "exit_code": res["exit_code"],
        "statuses": _statuses(vs),
        "faster": sum(1 for v in vs if v["status"] == "faster"),
        "speedup_min": min(speedups) if speedups else None,
        "speedup_max": max(speedups) if speedups else None,
        "speedup_median": round(statistics.median(speedups), 4) if speedups else None,
        "ci_low_max": max(lows) if lows else None,
    }
    if _problems(vs):
        out["problems"] = _problems(vs)[:3]
    if "stderr_tail" in res:
        out["stderr_tail"] = res["stderr_tail"]
    return out


# ----------------------------------------------------------------------------- machine


def machine_info() -> dict:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()
    return {
        "cpu_model": cpu or platform.processor(),
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch_version,
        "python": platform.python_version(),
        "gxx": gxx[0] if gxx else None,
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=20, help="native candidates in the batch (default 20)")
    p.add_argument("--rows", type=int, default=512, help="rows of the reference's input x (default 512)")
    p.add_argument("--cols", type=int, default=1024, help="columns of x and length of the bias (default 1024)")
    p.add_argument("--aa-runs", type=int, default=50, help="A/A evaluations (default 50)")
    p.add_argument("--skip-native", action="store_true", help="skip the native batch")
    p.add_argument("--skip-compat", action="store_true", help="skip the load_inline compat candidate")
    p.add_argument("--skip-aa", action="store_true", help="skip the A/A check")
    p.add_argument("--check-args", default="", help="extra arguments for every 'maxcode check' call, one string")
    p.add_argument("--omp-threads", type=int, help="set OMP_NUM_THREADS for the checks (default: inherited)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directories (their path goes to stderr)")
    ns = p.parse_args(argv)
    extra = ns.check_args.split()
    global ENV
    if ns.omp_threads is not None:
        ENV = dict(os.environ, OMP_NUM_THREADS=str(ns.omp_threads))

    ref_text = reference_source(ns.rows, ns.cols)
    report: dict = {
        "machine": machine_info(),
        "workload": {"reference": "tests/data/chain/ref.py", "x": [ns.rows, ns.cols], "bias": [ns.cols], "dtype": "float32"},
        "OMP_NUM_THREADS": (ENV or os.environ).get("OMP_NUM_THREADS"),
    }
    parent = Path(tempfile.mkdtemp(prefix="maxcode-bench-"))
    try:
        if not ns.skip_native:
            report["native_batch"] = bench_native(parent, ref_text, ns.candidates, extra)
        if not ns.skip_compat:
            report["compat_load_inline"] = bench_compat(parent, ref_text, extra)
        if not ns.skip_aa:
            report["aa"] = bench_aa(parent, ref_text, ns.aa_runs, extra)
        nat, com = report.get("native_batch"), report.get("compat_load_inline")
        if nat and com and nat["per_candidate_s"] > 0:
            ratio = com["total_s"] / nat["per_candidate_s"]
            report["ratio"] = {
                "compat_s": com["total_s"],
                "native_per_candidate_s": nat["per_candidate_s"],
                "compat_over_native_per_candidate": round(ratio, 2),
                "goal_native_le_1s_per_candidate": nat["per_candidate_s"] <= 1.0,
                "goal_compat_ge_10x": ratio >= 10.0,
            }
    finally:
        if ns.keep:
            sys.stderr.write(f"kept {parent}\n")
        else:
            shutil.rmtree(parent, ignore_errors=True)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
