"""bench-ab on identical code beside a CPU hog: runs forked from one server per side against a
new interpreter per run (issue 14). Prints each comparison, then per mode the false verdicts,
the standard deviation of the measured change and its largest size (identical code: all 0).

    python tests/benchmarks/ab_modes.py [COMPARISONS] [fork,fresh]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

import bench_regressions  # noqa: E402 - the repository it builds
from test_aa_runs import cpu_hog  # noqa: E402
from test_bench_ab import ARGS  # noqa: E402

from pytest_maxcode.bench import ab  # noqa: E402

def main(n: int, modes: list[str]) -> None:
    changes: dict[str, list[float]] = {m: [] for m in modes}
    false = dict.fromkeys(modes, 0)
    with tempfile.TemporaryDirectory() as tmp, cpu_hog(1):
        root = Path(tmp)
        bench_regressions.make_repo(root)
        for k in range(n):
            for mode in modes:
                base, head = ab.interleaved(root, "base", "same", ARGS, runs=ab.RUNS, project="proj", fork_server=mode == "fork")
                result = ab.judge(base, head)
                for c in result.comparisons:
                    changes[mode].append(c.change)
                    false[mode] += c.verdict != "unchanged"
                print(mode, k, [(c.name.split("::")[-1], c.verdict, round(c.change, 3), round(c.p_value or 0, 3))
                                for c in result.comparisons], flush=True)
    for mode, ch in changes.items():
        print(f"{mode}: {false[mode]} false of {len(ch)}, sd of change {statistics.stdev(ch):.4f}, "
              f"largest |change| {max(abs(x) for x in ch):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6, (sys.argv[2] if len(sys.argv) > 2 else "fork,fresh").split(","))
