"""The search loop's own overhead per evaluation, next to the oracle's time.

    python tests/benchmarks/bench_search_loop.py [--evaluations 16] [--k 4]

Runs the ``maxcode`` strategy against a scripted OpenAI-compatible server on 127.0.0.1
(the replies are scripted, not a model's: every one is a new correct kernel, so every
evaluation builds, checks and times for real). Prints JSON: wall time split into oracle
(builds, checks, timing), setup (worker start, reference outputs), waiting for replies,
and the rest: the loop's own work (prompt building, parsing, store writes, scheduling).
Goal: the loop's own work under 5% of the oracle's time.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: llm_fakes

from llm_fakes import FakeLLMServer, code_reply  # noqa: E402

from pytest_maxcode import options  # noqa: E402
from pytest_maxcode.llm import make_service  # noqa: E402
from pytest_maxcode.search.loop import SearchContext, search_target  # noqa: E402
from pytest_maxcode.search.policy import TargetInfo  # noqa: E402
from pytest_maxcode.store import Store  # noqa: E402
from pytest_maxcode.targets.capture import signature  # noqa: E402

KERNEL = (Path(__file__).resolve().parents[1] / "data" / "chain" / "good.cpp").read_text()
LIB = "import torch\n\n\ndef chain(x, bias):\n    y = torch.relu(x * 2.0 + bias)\n    return y * y - 0.5\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--evaluations", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="maxcode-bench-"))
    (root / "lib.py").write_text(LIB)
    inputs = root / ".maxcode" / "inputs" / "lib.chain"
    inputs.mkdir(parents=True)
    torch.manual_seed(0)
    x, b = torch.randn(512, 1024), torch.randn(1024)
    torch.save({"signature": signature((x, b)), "sets": [[x, b]]}, inputs / "w0.pt")
    counter = iter(range(1_000_000))

    def reply(body: dict[str, Any]) -> str:
        # a new source each time (a different comment): a new build, check and timing
        return code_reply(f"// scripted variant {next(counter)}\n" + KERNEL)

    with FakeLLMServer("openai") as srv, Store(root / ".maxcode" / "maxcode.db") as store:
        srv.respond_with(reply)
        settings = options.load_settings({}, None).replace(
            llm=srv.spec("bench-model"), strategy="maxcode", k=args.k, budget=args.evaluations, llm_concurrency=args.k)
        service = make_service(settings, root, store.path)
        target = TargetInfo("lib.chain", "lib", "chain", root / "lib.py", "function", "cpp")
        t0 = time.perf_counter()
        ctx = SearchContext(store, store.begin_run("bench", "0"), lambda m: None, llm=service)
        result = search_target(target, [inputs / "w0.pt"], root, settings, ctx)
        wall = time.perf_counter() - t0
        service.close()
    n = len(result.state.trajectory)
    t = result.timings
    own = wall - t["oracle_s"] - t["setup_s"] - t["llm_s"]
    print(json.dumps({
        "machine": f"{platform.node()}, {platform.processor() or platform.machine()}, torch {torch.__version__}",
        "replies": "scripted (not a model)",
        "evaluations": n,
        "statuses": sorted({nd.verdict.status for nd in result.state.trajectory}),
        "wall_s": round(wall, 3),
        "setup_s": round(t["setup_s"], 3),
        "oracle_s": round(t["oracle_s"], 3),
        "oracle_ms_per_evaluation": round(1e3 * t["oracle_s"] / max(n, 1), 2),
        "waiting_for_replies_s": round(t["llm_s"], 3),
        "loop_own_s": round(own, 4),
        "loop_own_ms_per_evaluation": round(1e3 * own / max(n, 1), 3),
        "loop_own_share_of_oracle": round(own / t["oracle_s"], 4) if t["oracle_s"] else None,
        "goal": "loop_own_share_of_oracle < 0.05",
    }, indent=2))


if __name__ == "__main__":
    main()
