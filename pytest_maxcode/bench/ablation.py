"""``maxcode ablate``: the same targets searched under each observation and rerank setting,
on equal evaluation budgets, several seeds each; a table and a best-speedup-vs-budget plot.

Each (observation, rerank, seed) is one real ``pytest --maxcode`` run of the project's own
tests, so the targets, their captured workloads and the oracle are exactly a user's. Runs
go one after another (timings must not share the machine). A run's curve is, after each
evaluation, the best *verified* speedup so far (a ``faster`` verdict; 1.0 before one: the
reference is what a user has without one), combined over targets by geometric mean.

With ``--record DIR`` each run records its model's replies to ``DIR/<run>.jsonl``; with
``--llm replay:DIR`` each run replays its own cassette, so an ablation reproduces offline.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MaxcodeError
from ..model.report import Evaluation, SearchSummary, row_of, rows_of
from ..report import curves_svg

OBSERVATIONS = ("feedback", "trajectory", "best", "trajectory+critique+best")
RERANKS = ("none",)


@dataclass(frozen=True)
class Setting:
    observation: str
    rerank: str

    @property
    def label(self) -> str:
        return f"{self.observation} | rerank {self.rerank}"

    def slug(self, seed: int) -> str:
        return f"{self.observation.replace('+', '-')}__{self.rerank}__s{seed}"


@dataclass
class RunResult:
    setting: Setting
    seed: int
    returncode: int
    report: Path | None
    curve: list[float] = field(default_factory=list)  # best verified speedup after evaluation i+1
    targets: int = 0
    faster: int = 0
    evaluations: int = 0
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    error: str | None = None


def settings_grid(observations: Sequence[str], reranks: Sequence[str]) -> list[Setting]:
    # the search layer, off maxcode --help's path (the cli imports this module): keeps start-up fast
    from ..search.observation import parse_observation

    grid = []
    for obs in observations:
        try:
            parse_observation(obs)
        except ValueError as e:
            raise MaxcodeError(f"--observations: {e}") from None
        for rerank in reranks:
            if rerank not in ("none", "light", "llm"):
                raise MaxcodeError(f"--reranks: {rerank!r} is not one of none, light, llm")
            grid.append(Setting(obs, rerank))
    return grid


def curve_of(report: Mapping[str, Any], budget: int) -> tuple[list[float], dict[str, Any]]:
    """The run's best-verified-speedup curve over ``budget`` evaluations, and its totals. ``report``
    is a run's report.json as read (a target's rows are read as the renderers read them, by type)."""
    per_target = []
    totals = {"targets": 0, "faster": 0, "evaluations": 0, "llm_calls": 0, "tokens": 0, "cost_usd": 0.0}
    for t in report.get("targets", []):
        traj = rows_of(Evaluation, t.get("trajectory"))
        search = row_of(SearchSummary, t.get("search")) if t.get("search") else None  # an empty one is none
        if not traj and search is None:
            continue  # skipped target: nothing was searched
        best, curve = 1.0, []
        for item in traj[:budget]:
            if item.status == "faster" and item.speedup:
                best = max(best, float(item.speedup))
            curve.append(best)
        curve += [best] * (budget - len(curve))  # a search that stopped early keeps its best
        per_target.append(curve)
        totals["targets"] += 1
        # a written report's faster target is "verified" (its tests passed with the kernel):
        # "faster" is only the search's interim answer, so counting it counted none
        totals["faster"] += t.get("status") == "verified"
        totals["evaluations"] += len(traj)
        if search is not None:
            totals["llm_calls"] += int(search.llm_calls or 0)
            totals["tokens"] += int(search.tokens or 0)
            totals["cost_usd"] += float(search.cost_usd or 0.0)
    if not per_target:
        return [], totals
    combined = [math.exp(sum(math.log(c[i]) for c in per_target) / len(per_target)) for i in range(budget)]
    return combined, totals


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def summarize(results: Sequence[RunResult], budget: int) -> list[dict[str, Any]]:
    """One row per setting: mean and spread over seeds, and the mean curve."""
    rows = []
    order: list[Setting] = []
    for r in results:
        if r.setting not in order:
            order.append(r.setting)
    for setting in order:
        runs = [r for r in results if r.setting == setting]
        ok = [r for r in runs if r.error is None and r.curve]
        row: dict[str, Any] = {"observation": setting.observation, "rerank": setting.rerank, "label": setting.label,
                               "seeds": len(runs), "completed": len(ok), "errors": [r.error for r in runs if r.error]}
        if ok:
            finals = [r.curve[-1] for r in ok]
            mean, sd = _mean_sd(finals)
            half = [r.curve[max(0, budget // 2 - 1)] for r in ok]
            row.update(
                best_speedup=mean, best_speedup_sd=sd, best_speedup_at_half_budget=_mean_sd(half)[0],
                faster_targets=sum(r.faster for r in ok) / max(1, sum(r.targets for r in ok)),
                evaluations=_mean_sd([r.evaluations for r in ok])[0], llm_calls=_mean_sd([r.llm_calls for r in ok])[0],
                tokens=_mean_sd([r.tokens for r in ok])[0], cost_usd=_mean_sd([r.cost_usd for r in ok])[0],
                curve=[[i + 1, _mean_sd([r.curve[i] for r in ok])[0]] for i in range(budget)],
            )
        rows.append(row)
    return rows


def markdown_table(rows: Sequence[dict[str, Any]], budget: int) -> str:
    head = (f"| observation | rerank | seeds | best speedup (mean ± sd) | at {max(1, budget // 2)} evals | "
            "targets faster | evaluations | LLM calls | cost |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "best_speedup" not in r:
            lines.append(f"| {r['observation']} | {r['rerank']} | {r['seeds']} | failed: {'; '.join(r['errors'])[:120]} | | | | | |")
            continue
        lines.append(
            f"| {r['observation']} | {r['rerank']} | {r['completed']}/{r['seeds']} | {r['best_speedup']:.3f} ± {r['best_speedup_sd']:.3f} | "
            f"{r['best_speedup_at_half_budget']:.3f} | {100 * r['faster_targets']:.0f}% | {r['evaluations']:.1f} | "
            f"{r['llm_calls']:.1f} | ${r['cost_usd']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def run_pytest(root: Path, setting: Setting, seed: int, *, budget: int, llm: str | None, record: Path | None,
               out_dir: Path, pytest_args: Sequence[str], timeout: float | None) -> RunResult:
    """One pytest --maxcode run of an ablation. Parameters because they are the ablation's own options
    passed through, keyword-only."""
    slug = setting.slug(seed)
    report = out_dir / "runs" / f"{slug}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--maxcode",
            f"--maxcode-observation={setting.observation}", f"--maxcode-rerank={setting.rerank}",
            f"--maxcode-search-seed={seed}", f"--maxcode-budget={budget}", f"--maxcode-json={report}"]
    if llm:
        if llm.startswith("replay:") and Path(_at(root, llm[len("replay:"):])).is_dir():
            llm = f"replay:{Path(_at(root, llm[len('replay:'):])) / f'{slug}.jsonl'}"
        args.append(f"--maxcode-llm={llm}")
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
        args.append(f"--maxcode-record={record / f'{slug}.jsonl'}")
    args += list(pytest_args)
    start = time.monotonic()
    try:
        proc = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return RunResult(setting, seed, 124, None, elapsed_s=time.monotonic() - start, error=f"did not finish within {timeout:.0f} s")
    result = RunResult(setting, seed, proc.returncode, report if report.is_file() else None, elapsed_s=time.monotonic() - start)
    (out_dir / "runs" / f"{slug}.log").write_text(proc.stdout + proc.stderr)
    if result.report is None:
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        result.error = f"pytest exited {proc.returncode} without a report: {tail[0][:200]}"
        return result
    data = json.loads(result.report.read_text())
    curve, totals = curve_of(data, budget)
    result.curve = curve
    for key, value in totals.items():
        setattr(result, key, value)
    if not curve:
        result.error = "no target was searched (did the tests call a @maxcode.optimize function?)"
    return result


def _at(root: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def ablate(root: Path, *, observations: Sequence[str] = OBSERVATIONS, reranks: Sequence[str] = RERANKS, seeds: int = 3,
           budget: int = 8, llm: str | None = None, record: Path | None = None, out_dir: Path | None = None,
           pytest_args: Sequence[str] = (), timeout: float | None = None,
           progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Every setting and seed as real pytest --maxcode runs, and the table of their curves.

    Parameters because each is one of the ``maxcode ablate`` command's options, keyword-only.
    """
    if seeds < 1 or budget < 1:
        raise MaxcodeError("--seeds and --budget must be at least 1")
    grid = settings_grid(observations, reranks)
    out_dir = _at(root, str(out_dir)) if out_dir else root / ".maxcode" / "ablation" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    total = len(grid) * seeds
    for setting in grid:
        for seed in range(seeds):
            progress(f"[{len(results) + 1}/{total}] {setting.label}, seed {seed}")
            r = run_pytest(root, setting, seed, budget=budget, llm=llm, record=_at(root, str(record)) if record else None,
                           out_dir=out_dir, pytest_args=pytest_args, timeout=timeout)
            if r.error:
                progress(f"  {r.error}")
            results.append(r)
    rows = summarize(results, budget)
    curves = {r["label"]: r["curve"] for r in rows if "curve" in r}
    (out_dir / "curves.svg").write_text(curves_svg(curves, None, title=f"best verified speedup vs evaluations (mean of {seeds} seed(s))"))
    (out_dir / "table.md").write_text(markdown_table(rows, budget))
    summary = {
        "budget": budget, "seeds": seeds, "llm": llm, "settings": [s.label for s in grid], "rows": rows,
        "runs": [{"observation": r.setting.observation, "rerank": r.setting.rerank, "seed": r.seed, "returncode": r.returncode,
                  "report": str(r.report) if r.report else None, "curve": r.curve, "error": r.error,
                  "elapsed_s": round(r.elapsed_s, 2)} for r in results],
        "out_dir": str(out_dir),
    }
    (out_dir / "ablation.json").write_text(json.dumps(summary, indent=2))
    return summary
