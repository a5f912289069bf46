"""Regression mode under load: false alarms, detection, wall time (issue 14's benchmark).

A repository whose base has three benchmarks, a head that changes nothing but the commit
(``same``), and a head that slows one benchmark 2x and one by 20% (``slow``). Beside a CPU
hog (one busy process per core, as on a shared runner) it runs

- the interleaved mode (``maxcode bench-ab``: base and head alternately, ``--runs`` processes
  each, forked from a server per side, a rank test of a change beyond the threshold on
  per-process figures), the same with a new interpreter per run (``fresh``), and the old mode
  (one pytest-benchmark run of the base, then one of the head, ``maxcode compare``: Mann-Whitney
  on the rounds), ``--same`` times on the unchanged head and ``--slow`` times on the slow one;
- the instruction mode once on each head.

The modes take turns, comparison by comparison, so that the machine's slow changes weigh on
all of them alike. It prints one JSON object: false regressions per benchmark comparison on the unchanged head
(target 0), false changes of either sign there (an unchanged benchmark called "improved" is as
wrong), how often the 2x and the 20% were flagged, and the wall time per comparison of each
mode. ``--bursty``: the busy processes work and rest by turns (0.2 to 2 s each, at random), as a
neighbour's job with its own phases does, instead of spinning throughout. Usage:
``python tests/benchmarks/bench_regressions.py [--same 20] [--slow 10] [--bursty] [--modes interleaved,fresh,old]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_aa_runs import _spin, cpu_hog  # noqa: E402
from test_bench_ab import BENCH  # noqa: E402  the same three benchmarks as the test

from pytest_maxcode.bench import ab  # noqa: E402
from pytest_maxcode.bot import compare as cmp  # noqa: E402


def make_repo(root: Path) -> None:
    r = git.Repo.init(root)
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t").set_value("user", "email", "t@example.com")
    (root / "proj").mkdir()
    for tag, (doubled, fifth) in (("base", (4000, 4000)), ("same", (4000, 4000)), ("slow", (8000, 4800))):
        (root / "proj" / "test_bench.py").write_text(BENCH.format(doubled=doubled, fifth=fifth) + f"\n# {tag}\n")
        r.index.add(["proj/test_bench.py"])
        r.index.commit(tag)
        r.create_tag(tag)


def old_mode(root: Path, head: str) -> tuple[dict[str, str], float]:
    """What the action did before: a full benchmark run of the base, then one of the head."""
    start = time.perf_counter()
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, ref in (("base", "base"), ("head", head)):
            tree = Path(tmp) / side
            git.Repo(root).git.worktree("add", "--detach", str(tree), ref)
            out = Path(tmp) / f"{side}.json"
            subprocess.run([sys.executable, "-m", "pytest", "--benchmark-only", f"--benchmark-json={out}", "-q",
                            "-p", "no:cacheprovider"], cwd=tree / "proj", capture_output=True, check=True)
            files[side] = cmp.load_timings(out)
            git.Repo(root).git.worktree("remove", "--force", str(tree))
    result = cmp.compare(files["base"], files["head"])
    return {c.name.split("::")[-1]: c.verdict for c in result.comparisons}, time.perf_counter() - start


def interleaved(root: Path, head: str, runs: int, timer: str = "time", *, fresh: bool = False) -> tuple[dict[str, str], float]:
    start = time.perf_counter()
    base, measured = ab.interleaved(root, "base", head, [], runs=runs, project="proj", timer=timer, fork_server=not fresh)
    result = ab.judge(base, measured, timer=timer)
    return {c.name.split("::")[-1]: c.verdict for c in result.comparisons}, time.perf_counter() - start


def _bursts(stop: multiprocessing.synchronize.Event) -> None:
    """Work and rest by turns, 0.2 to 2 s each, on this process's own random schedule."""
    rng = random.Random(os.getpid())
    while not stop.is_set():
        until = time.monotonic() + rng.uniform(0.2, 2.0)
        while time.monotonic() < until and not stop.is_set():
            sum(i * i for i in range(10_000))
        stop.wait(rng.uniform(0.2, 2.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--same", type=int, default=20, help="comparisons of the unchanged head")
    ap.add_argument("--slow", type=int, default=10, help="comparisons of the slowed head")
    ap.add_argument("--runs", type=int, default=ab.RUNS)
    ap.add_argument("--hog", type=int, default=os.cpu_count() or 2, help="busy processes beside it")
    ap.add_argument("--bursty", action="store_true", help="the busy processes work and rest by turns")
    ap.add_argument("--modes", default="interleaved,old", help="which wall-clock modes to run (fresh: interleaved with "
                    "a new interpreter per run instead of runs forked from a server)")
    ns = ap.parse_args()
    out: dict[str, object] = {"machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start",
                              "hog_processes": ns.hog, "bursty": ns.bursty, "runs_per_side": ns.runs}
    modes = {"interleaved": lambda h: interleaved(root, h, ns.runs), "old": lambda h: old_mode(root, h),
             "fresh": lambda h: interleaved(root, h, ns.runs, fresh=True)}
    chosen = ns.modes.split(",")
    with tempfile.TemporaryDirectory() as tmp, cpu_hog(ns.hog, _bursts if ns.bursty else _spin):
        root = Path(tmp)
        make_repo(root)
        # the modes take turns, comparison by comparison: the machine's slow changes weigh on all alike
        results = {m: {"same": [], "slow": []} for m in chosen}
        for head in ["same"] * ns.same + ["slow"] * ns.slow:
            for m in chosen:
                results[m][head].append(modes[m](head))
        for mode in chosen:
            same, slow = results[mode]["same"], results[mode]["slow"]
            out[mode] = {
                "false_regressions": sum(v == "regressed" for verdicts, _ in same for v in verdicts.values()),
                "false_changes": sum(v != "unchanged" for verdicts, _ in same for v in verdicts.values()),
                "same_comparisons": 3 * ns.same,
                "detected_2x": sum(v["test_doubled"] == "regressed" for v, _ in slow) / max(1, ns.slow),
                "detected_20pct": sum(v["test_fifth"] == "regressed" for v, _ in slow) / max(1, ns.slow),
                "false_on_slow_head": sum(v["test_same"] != "unchanged" for v, _ in slow),
                "wall_s_per_comparison": round(sum(t for _, t in same + slow) / max(1, ns.same + ns.slow), 1),
            }
            print(json.dumps({mode: out[mode]}), file=sys.stderr, flush=True)
        if shutil.which("valgrind"):
            counts = {h: interleaved(root, h, 1, "instructions") for h in ("same", "slow")}
            out["instructions"] = {
                "false_regressions": sum(v == "regressed" for v in counts["same"][0].values()),
                "detected_2x": counts["slow"][0]["test_doubled"] == "regressed",
                "detected_20pct": counts["slow"][0]["test_fifth"] == "regressed",
                "false_on_slow_head": counts["slow"][0]["test_same"] == "regressed",
                "wall_s_per_comparison": round((counts["same"][1] + counts["slow"][1]) / 2, 1),
            }
    out["load_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
