"""A/A across runs, with the machine's state (issue 14): N fresh oracles on the chain kernel,
one JSON line per run with its speedup, interval, blocks, and the host's steal time and the
VM's CPU use meanwhile, to tell a low run caused by the machine from one caused by the run.
Usage: ``python tests/benchmarks/aa_probe.py [N]`` (default 10)."""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference


def cpu() -> list[int]:
    """The VM's CPU counters: user nice system idle iowait irq softirq steal (jiffies)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("ref.py", "good.cpp"):
            shutil.copy(DATA / "chain" / name, root / name)
        cand = CandidateSpec.from_path(root / "good.cpp")
        for i in range(n):
            a, t0 = cpu(), time.time()
            with Oracle(parse_reference(str(root / "ref.py")), CheckConfig(time_budget=0.1, timeout=120), root) as oracle:
                v = oracle.check([cand])[0].to_json()
            b = cpu()
            d = [y - x for x, y in zip(a, b)]
            blocks = [round(x["speedup"], 2) for x in v["diagnostics"].get("blocks", [])]
            print(json.dumps({"i": i, "speedup": round(v["speedup"] or 0, 2), "ci": [round(x, 2) for x in v["speedup_ci"] or []],
                              "status": v["status"], "blocks": blocks, "steal_jiffies": d[7], "iowait": d[4],
                              "busy_share": round((sum(d) - d[3] - d[4]) / max(sum(d), 1), 2), "s": round(time.time() - t0, 1),
                              "load": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
