"""``maxcode bench kernelbench DIR --level N``: the field's KernelBench metrics (DESIGN.md section 7).

Each problem is checked by the oracle (correctness on several seeded input sets, timing
interleaved with the reference, the speedup's 95% interval, a second measurement for a
``faster`` one). Against both baselines of the field, measured in the same run: eager (the
problem's own ``Model``) and ``torch.compile`` (a compat candidate compiling it, checked
alongside), so ``speedup vs compile = speedup vs eager / compile's speedup vs eager``.

Metrics: correctness rate; fast_p, the share of all problems that are correct and faster
than p times the baseline, for p in 0, 0.5, 0.8, 1, 1.5, 2 (fast_0 is the correctness rate);
the geometric-mean speedup over correct problems. Problems whose outputs make weak checks
(they barely depend on the inputs) are listed as such.

Candidates come from a directory of generations (``--generations``: compat ``ModelNew``
files or native sources, named by problem number) or from the search (``--llm``, else the
built-in policy, which for a KernelBench problem tries ``torch.compile`` variants).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import NO_CUDA_DEVICE, MaxcodeError
from ..options import positive_float, positive_int
from ..report import REMEASURE_REPEATS, remeasure_text
from .problems import Problem, find_problems, scaled_source

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "")
PS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
_GENERATION = re.compile(r"^(?:level_?\d+_problem_?)?(?P<number>\d+)(?:[_.-]|$)")


@dataclass
class ProblemResult:
    number: int
    name: str
    status: str  # the candidate's verdict status, or "no_candidate" / "reference_error"
    correct: bool = False
    speedup: float | None = None  # vs eager
    speedup_ci: list[float] | None = None
    compile_speedup: float | None = None  # torch.compile vs eager
    compile_status: str | None = None
    speedup_vs_compile: float | None = None
    weak_check: bool = False
    candidate: str | None = None
    reason: str = ""
    scaled: dict[str, list[int]] = field(default_factory=dict)
    wall_s: float = 0.0
    #: the command (run in the problem's folder) that times the candidate again, five times
    remeasure: str | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="a KernelBench checkout (or its KernelBench/ or levelN/ folder)")
    p.add_argument("--level", type=int, required=True, choices=(1, 2, 3, 4), help="the KernelBench level")
    p.add_argument("--problems", metavar="LIST", help="problem numbers and ranges, e.g. 1-10,23 (default: all)")
    p.add_argument("--scale", type=positive_float, default=1.0, metavar="F",
                   help="multiply the problems' size constants by F (e.g. 0.25 on a small machine); kernel sizes, strides and the like stay")
    p.add_argument("--generations", metavar="DIR",
                   help="check these files instead of searching: compat ModelNew .py files or native .cpp/.cu, named by problem number "
                        "(19_ReLU.py, 19.cpp, level_1_problem_19_sample_0_kernel.py)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--llm", metavar="SPEC", help="search with this model (spelled like --maxcode-llm); default: the built-in policy")
    p.add_argument("--strategy", metavar="NAME", help="the search strategy (default: maxcode with a model, sweep without)")
    p.add_argument("--budget", type=positive_int, default=4, metavar="N", help="search: candidates evaluated per problem (default 4)")
    p.add_argument("--time-budget", type=positive_float, default=0.5, metavar="SECONDS", help="timing per candidate (default 0.5)")
    p.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline (its compilation is slow on CPUs)")
    p.add_argument("--out", metavar="DIR", help="work folder and results (default .maxcode/bench/kernelbench-<time>/)")
    p.add_argument("--json", metavar="PATH", help="also write the JSON result here")
    p.add_argument("--markdown", metavar="PATH", help="also write the markdown table here")


def generation_for(problem: Problem, generations: Path) -> Path | None:
    """The generation named by the problem's number; several samples: the first by name."""
    found = sorted(p for p in generations.iterdir()
                   if p.suffix in (".py", ".cpp", ".cu") and (m := _GENERATION.match(p.name)) and int(m.group("number")) == problem.number)
    return found[0] if found else None


def fast_p(rows: list[ProblemResult], p: float, *, vs: str = "eager") -> float:
    """Share of all problems that are correct and more than p times faster than the baseline."""
    if not rows:
        return 0.0
    key = "speedup" if vs == "eager" else "speedup_vs_compile"
    hits = sum(1 for r in rows if r.correct and (p == 0.0 or (getattr(r, key) or 0.0) > p))
    return hits / len(rows)


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def metrics(rows: list[ProblemResult]) -> dict[str, Any]:
    correct = [r for r in rows if r.correct]
    return {
        "problems": len(rows),
        "correct": len(correct),
        "correctness_rate": len(correct) / len(rows) if rows else 0.0,
        "fast_p": {"eager": {str(p): fast_p(rows, p) for p in PS},
                   "compile": {str(p): fast_p(rows, p, vs="compile") for p in PS} if any(r.compile_speedup for r in rows) else None},
        "geomean_speedup": {"eager": geomean([r.speedup for r in correct if r.speedup]),
                            "compile": geomean([r.speedup_vs_compile for r in correct if r.speedup_vs_compile])},
        "weak_check": [r.number for r in rows if r.weak_check],
    }


def _prepare_dir(problem: Problem, work: Path, scale: float) -> tuple[Path, str, dict[str, list[int]]]:
    d = work / f"p{problem.number}"
    d.mkdir(parents=True, exist_ok=True)
    module = f"kb_l{problem.level}_p{problem.number}"
    source, changes = scaled_source(problem.path.read_text(), scale)
    (d / f"{module}.py").write_text(source)
    return d / f"{module}.py", module, {k: [a, b] for k, (a, b) in changes.items()}


@dataclass(frozen=True)
class ProblemRun:
    """How each problem of one ``maxcode bench kernelbench`` run is checked: its flags, resolved."""

    scale: float
    generations: Path | None  # a folder of ready candidates, or None to search for them
    device: str | None
    time_budget: float
    compile_baseline: bool
    search: Any = None  # called with (problem, reference file, module): (candidate file or None, reason)
    progress: Callable[[str], None] = lambda m: None


def _check(reference_file: Path, candidate: Path | None, compile_file: Path | None, run: ProblemRun) -> tuple[Any, Any]:
    # the oracle (and torch with it) loads when a problem is checked: keeps start-up fast
    from ..oracle.check import CandidateSpec, CheckConfig, Oracle
    from ..oracle.reference import parse_reference

    specs = [CandidateSpec.from_path(p) for p in (candidate, compile_file) if p is not None]
    config = CheckConfig(device=run.device, time_budget=run.time_budget)
    with Oracle(parse_reference(str(reference_file)), config, reference_file.parent, progress=run.progress) as oracle:
        verdicts = oracle.check(specs) if specs else []
    it = iter(verdicts)
    return (next(it) if candidate is not None else None), (next(it) if compile_file is not None else None)


def _candidate(problem: Problem, ref_file: Path, module: str, run: ProblemRun, result: ProblemResult) -> Path | None:
    """The problem's candidate: its generation, or what the search found (None: none, with the reason)."""
    if run.generations is not None:
        found = generation_for(problem, run.generations)
        if found is None:
            result.reason = f"no generation for problem {problem.number} in {run.generations}"
            return None
        candidate = ref_file.parent / f"generation{found.suffix}"
        shutil.copyfile(found, candidate)
        result.candidate = str(found)
        return candidate
    if run.search is not None:
        candidate, result.reason = run.search(problem, ref_file, module)
        result.candidate = str(candidate) if candidate else None
        return candidate
    return None


def _record(result: ProblemResult, verdict: Any, compiled: Any) -> None:
    if compiled is not None:
        result.compile_status = compiled.status
        result.compile_speedup = compiled.speedup if compiled.correct else None
    if verdict is not None:
        result.status, result.correct = verdict.status, verdict.correct
        result.speedup, result.speedup_ci = verdict.speedup, verdict.speedup_ci
        result.weak_check = verdict.weak_check
        result.reason = (verdict.reasons or [""])[0]
        if verdict.correct and verdict.speedup and result.compile_speedup:
            result.speedup_vs_compile = verdict.speedup / result.compile_speedup


def run_problem(problem: Problem, work: Path, run: ProblemRun) -> ProblemResult:
    start = time.monotonic()
    ref_file, module, scaled = _prepare_dir(problem, work, run.scale)
    result = ProblemResult(problem.number, problem.name, "no_candidate", scaled=scaled)
    candidate = _candidate(problem, ref_file, module, run, result)
    compile_file = None
    if run.compile_baseline:
        # only for --compile-baseline: keeps start-up fast
        from ..search.policy import compile_candidate_text

        compile_file = ref_file.parent / "compile_baseline.py"
        compile_file.write_text(compile_candidate_text(f"{module}.Model", module, "Model", "module", "default"))
    # the candidate *is* the baseline (what the built-in search finds when compiling wins):
    # one measurement serves both, and "vs compile" is 1 exactly, not the noise of two runs
    same = candidate is not None and compile_file is not None and candidate.read_text() == compile_file.read_text()
    if same:
        compile_file = None
    if candidate is None and compile_file is None:
        result.wall_s = time.monotonic() - start
        return result
    try:
        verdict, compiled = _check(ref_file, candidate, compile_file, run)
    except MaxcodeError as e:
        result.status, result.reason = "reference_error", str(e)
        result.wall_s = time.monotonic() - start
        return result
    _record(result, verdict, verdict if same else compiled)
    if candidate is not None and result.correct and result.speedup_ci:
        result.remeasure = shlex.join(["maxcode", "check", ref_file.name, os.path.relpath(candidate, ref_file.parent),
                                       *(["--device", run.device] if run.device else []),
                                       "--time-budget", f"{run.time_budget:g}", "--repeat", str(REMEASURE_REPEATS)])
    result.wall_s = time.monotonic() - start
    return result


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}x"


def markdown(summary: dict[str, Any]) -> str:
    m = summary["metrics"]
    lines = [f"### KernelBench level {summary['level']}: {m['correct']}/{m['problems']} correct "
             f"({100 * m['correctness_rate']:.0f}%), {summary['device']}, scale {summary['scale']:g}", ""]
    head = "| baseline | " + " | ".join(f"fast_{p:g}" for p in PS) + " | geomean speedup (correct) |"
    lines += [head, "|---|" + "---:|" * (len(PS) + 1)]
    for vs in ("eager", "compile"):
        fp = m["fast_p"][vs]
        if fp is None:
            continue
        lines.append(f"| {vs} | " + " | ".join(f"{100 * fp[str(p)]:.0f}%" for p in PS) + f" | {_x(m['geomean_speedup'][vs])} |")
    lines += ["", "| problem | status | vs eager (95% CI) | torch.compile vs eager | vs compile | wall |", "|---|---|---:|---:|---:|---:|"]
    for r in summary["results"]:
        ci = f" [{r['speedup_ci'][0]:.3g}, {r['speedup_ci'][1]:.3g}]" if r.get("speedup_ci") else ""
        status = r["status"] + (" (weak check)" if r["weak_check"] else "")
        lines.append(f"| {r['number']}_{r['name']} | {status} | {_x(r['speedup'])}{ci} | {_x(r['compile_speedup'])} | "
                     f"{_x(r['speedup_vs_compile'])} | {r['wall_s']:.1f} s |")
    if m["weak_check"]:
        lines += ["", "Weak checks (outputs barely depend on the inputs): " + ", ".join(map(str, m["weak_check"]))]
    again = [r for r in summary["results"] if r.get("remeasure") and r.get("speedup_ci")]
    if again:
        where = summary.get("problems_dir") or "problems"
        lines += ["", f"Re-measure a speedup (in its problem's folder under `{where}`):", ""]
        for r in again:
            shown = remeasure_text({"remeasure": {"command": r["remeasure"], "expect": r["speedup_ci"]}})
            if shown:
                lines.append(f"- p{r['number']}: `{shown[0]}`: {shown[1]}")
    return "\n".join(lines) + "\n"


def run(ns: argparse.Namespace) -> int:
    # imported when the command runs: keeps start-up fast
    from rich.console import Console

    console = Console(stderr=True)
    problems = find_problems(Path(ns.dir), ns.level, ns.problems)
    generations = Path(ns.generations) if ns.generations else None
    if generations is not None and not generations.is_dir():
        raise MaxcodeError(f"--generations {generations}: no such folder")
    out = Path(ns.out) if ns.out else Path.cwd() / ".maxcode" / "bench" / f"kernelbench-{time.strftime('%Y%m%d-%H%M%S')}"
    work = out / "problems"
    device = ns.device
    if device != "cpu":
        import torch  # only to pick the device: keeps start-up fast

        if device == "cuda" and not torch.cuda.is_available():
            raise MaxcodeError(NO_CUDA_DEVICE)
        device = "cuda" if torch.cuda.is_available() else "cpu"
    search = None
    if generations is None:
        # the search and the LLM load only for a search: keeps start-up fast
        from .kernelbench_search import Searcher

        search = Searcher(out, ns, device, progress=lambda m: console.print(f"  {m}", highlight=False))
    how = ProblemRun(ns.scale, generations, device, ns.time_budget, not ns.no_compile_baseline, search)
    rows = []
    try:
        for i, problem in enumerate(problems, 1):
            console.print(f"[{i}/{len(problems)}] {problem.id}", highlight=False)
            r = run_problem(problem, work, how)
            console.print(f"  {r.status} {_x(r.speedup)} vs eager, torch.compile {_x(r.compile_speedup)}, {r.wall_s:.1f} s", highlight=False)
            rows.append(r)
    finally:
        if search is not None:
            search.close()
    summary = {"suite": "kernelbench", "level": ns.level, "scale": ns.scale, "device": device,
               "mode": "generations" if generations else "search", "metrics": metrics(rows),
               "results": [asdict(r) for r in rows], "wall_s": round(sum(r.wall_s for r in rows), 2),
               "problems_dir": str(work)}
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(summary)
    paths = [out / "result.json"] + ([Path(ns.json)] if ns.json else [])
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
    for path in [out / "table.md"] + ([Path(ns.markdown)] if ns.markdown else []):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(text, end="")
    return 0
