"""The search loop for one target: policy -> strategy -> oracle batches -> store.

Resumable: before a batch goes to the oracle, candidates already evaluated under the
same configuration and workloads are taken from the store, so a run killed mid-search
and started again repeats no finished evaluation.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import MaxcodeError
from ..oracle.check import CheckConfig, Oracle
from ..oracle.reference import ReferenceSpec
from ..oracle.verdict import Verdict
from ..targets.decorator import normalized_source_in_file
from .policy import BuiltinPolicy, TargetInfo
from .strategy import SearchState, SweepStrategy


@dataclass
class SearchResult:
    target: TargetInfo
    state: SearchState
    stop_reason: str
    workloads: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    resumed: int = 0
    elapsed_s: float = 0.0


def evaluation_key(config: CheckConfig, signatures: list[str], reference_source: str) -> str:
    """What a verdict depends on: the check's settings, the workloads' signatures, and the
    reference's code. Not the captured values: tests draw fresh random inputs each run."""
    h = hashlib.sha256()
    for part in (config.key(), *sorted(signatures), reference_source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def verdict_from_row(row: dict[str, Any], path: str) -> Verdict:
    ci = [row["ci_low"], row["ci_high"]] if row["ci_low"] is not None else None
    return Verdict(
        candidate=path,
        status=row["status"],
        speedup=row["speedup"],
        speedup_ci=ci,
        reference_s=row["reference_s"],
        candidate_s=row["candidate_s"],
        compile_s=row["compile_s"],
        eval_s=row["eval_s"],
        weak_check=bool(row["weak_check"]),
        reasons=row["reasons"],
        diagnostics=dict(row["diagnostics"], resumed=True),
        hash=row["candidate_hash"],
    )


def search_target(
    target: TargetInfo,
    captured: list[Path],
    root: Path,
    settings: dict[str, Any],
    *,
    store: Any,
    run_id: int | None,
    progress: Callable[[str], None],
) -> SearchResult:
    start = time.monotonic()
    state = SearchState(target.id)
    min_speedup = target.min_speedup or settings["min_speedup"]
    device = settings["device"] or ("cuda" if target.lang == "cuda" else "cpu")
    config = CheckConfig(device=device, atol=target.atol, rtol=target.rtol, min_speedup=min_speedup, inplace=target.inplace)
    instance = captured[0].parent / "module.pt" if target.kind == "module" else None
    reference = ReferenceSpec(target.kind, target.source_file, target.qualname, module=target.module, rootdir=root, instance=instance)
    import torch

    from ..targets.dispatch import _arg_class, arg_key

    workloads = []
    for f in captured:
        data = torch.load(f, weights_only=True)
        workloads.append({
            "name": f.stem,
            "captured": str(f),
            "signature": data["signature"],
            # what dispatch needs later: each set's key (for output shapes) and the layout
            "arg_keys": [arg_key(s) for s in data["sets"]],
            "layout": [list(_arg_class(v)) for v in data["sets"][0]],
        })
    result = SearchResult(target, state, "", workloads)
    policy = BuiltinPolicy(target, root, device, torch_compile=bool(settings.get("torch_compile", True)))
    proposals = policy.proposals()
    budget = target.budget or settings["budget"]
    strategy = SweepStrategy(budget, settings.get("time"))
    strategy.initialize(state, proposals)
    if not proposals:
        result.stop_reason = "the built-in policy has nothing to propose (add seeds under maxcode_kernels/seeds/)"
        return result
    oracle = Oracle(
        reference, config, root, store=store, run_id=run_id, progress=progress,
        candidates_hint=[p.spec for p in proposals],
        workloads=[{"name": w["name"], "captured": w["captured"]} for w in workloads],
    )
    oracle.eval_key = evaluation_key(
        config, [w["signature"] for w in workloads], normalized_source_in_file(target.source_file, target.qualname) or ""
    )
    try:
        with oracle:
            for w, wl in zip(workloads, oracle.workloads):
                w["n_sets"] = len(wl.expected)
                w["weak"] = wl.weak
                w["outputs"] = [] if target.inplace else [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in wl.expected[0]]
                w["returns"] = wl.returns
            while (why := strategy.should_stop()) is None:
                batch = strategy.propose(budget)
                done: dict[int, Verdict] = {}
                for i, p in enumerate(batch):
                    row = store.find_evaluation(target.id, p.spec.hash, oracle.eval_key) if store else None
                    if row is not None:
                        done[i] = verdict_from_row(row, str(p.spec.path))
                        result.resumed += 1
                todo = [p for i, p in enumerate(batch) if i not in done]
                progress(f"{target.id}: evaluating {len(todo)} candidate(s)" + (f", {len(done)} from the store" if done else ""))
                fresh = iter(oracle.check([p.spec for p in todo]) if todo else [])
                verdicts = [done[i] if i in done else next(fresh) for i in range(len(batch))]
                strategy.update(list(zip(batch, verdicts)))
            result.stop_reason = why
    except MaxcodeError as e:
        result.error = str(e)
        result.stop_reason = "the reference could not be checked"
    result.elapsed_s = time.monotonic() - start
    return result
