"""The ``maxcode`` command. A thin front end: options come from ``options``, work from the layers."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from . import options
from ._version import __version__
from .errors import MaxcodeError

STATUS_STYLE = {
    "faster": "bold green",
    "not_faster": "yellow",
    "wrong": "red",
    "compile_error": "red",
    "runtime_error": "red",
    "crash": "red",
    "timeout": "red",
    "rejected": "bold red",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other usage error
        self.exit(2, f"maxcode: error: {message} (see 'maxcode {self.prog.split()[-1]} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="maxcode", description="Verified C++/CUDA speedups for hot PyTorch and C++ code.")
    parser.add_argument("--version", action="version", version=f"pytest-maxcode {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser(
        "check",
        help="verify and time candidates against a reference",
        description=(
            "Verify candidates against a reference on several seeded input sets and time them "
            "interleaved with it. REFERENCE is a KernelBench problem file (Model, get_inputs, "
            "get_init_inputs) or FILE.py:FUNCTION with --inputs. CANDIDATE is a native .cpp/.cu "
            "file defining maxcode_run, or a compat .py file defining ModelNew. Exit status: 0 when "
            "every candidate is correct, 1 when any is not, 2 for a usage error or a broken reference."
        ),
    )
    check.add_argument("reference", metavar="REFERENCE")
    check.add_argument("candidates", metavar="CANDIDATE", nargs="+")
    check.add_argument("--inputs", metavar="FILE.py:FUNCTION", help="the function that returns one input set (for FILE.py:FUNCTION references)")
    options.add_to_argparse(check, "check")
    status = sub.add_parser(
        "status",
        help="list every locked target as active, stale, missing or device-mismatch",
        description=(
            "Read the nearest maxcode.lock and say, for each target, whether its kernel would run here. "
            "Exit status 1 when any kernel is stale or missing (re-run pytest --maxcode), else 0."
        ),
    )
    status.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    apply = sub.add_parser(
        "apply",
        help="write the verified kernels of a saved report into maxcode_kernels/ and maxcode.lock",
        description="Apply every verified target of a report written by pytest --maxcode. Exit status 1 when none was applied.",
    )
    apply.add_argument("report", nargs="?", default=".maxcode/reports/report.json", metavar="REPORT", help="default: .maxcode/reports/report.json")
    return parser


def cmd_apply(ns: argparse.Namespace) -> int:
    from .apply import apply_report
    from .report import validate

    path = Path(ns.report)
    if not path.is_file():
        raise MaxcodeError(f"{path}: no such report; run pytest --maxcode first")
    try:
        report = json.loads(path.read_text())
    except ValueError as e:
        raise MaxcodeError(f"{path}: not JSON ({e})") from None
    errors = validate(report)
    if errors:
        raise MaxcodeError(f"{path}: not a maxcode report ({errors[0]})")
    root = Path.cwd()
    lines = apply_report(report, root)
    for line in lines:
        print(line)
    return 0 if any(": applied " in line for line in lines) else 1


def cmd_status(ns: argparse.Namespace) -> int:
    from .targets.accept import reference_hash_in_file
    from .targets.dispatch import entry_state
    from .targets.lock import find_lock, read_lock

    lock = find_lock(Path.cwd())
    if lock is None:
        sys.stderr.write("maxcode: no maxcode.lock here or above; no kernel is accepted yet\n")
        return 0
    try:
        entries = read_lock(lock)
    except ValueError as e:
        raise MaxcodeError(str(e)) from None
    root = lock.parent
    rows = []
    for target, entry in sorted(entries.items()):
        ref_file, qualname = entry.extra.get("reference_file"), entry.extra.get("qualname")
        current = reference_hash_in_file(root / ref_file, qualname) if ref_file and qualname else None
        state, why = entry_state(entry, root, current)
        rows.append({"target": target, "state": state, "reason": why, "kernel": entry.kernel, "speedup": entry.speedup})
    if ns.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=str(lock))
        for col in ("target", "state", "kernel", "speedup", "why"):
            table.add_column(col)
        style = {"active": "green", "stale": "red", "missing": "red", "device-mismatch": "yellow"}
        for r in rows:
            table.add_row(r["target"], f"[{style[r['state']]}]{r['state']}[/]", r["kernel"], f"{r['speedup']:.3g}x", r["reason"])
        Console().print(table)
    return 1 if any(r["state"] in ("stale", "missing") for r in rows) else 0


def _config(ns: argparse.Namespace):
    from .oracle.check import CheckConfig

    if ns.seeds < 2:
        raise MaxcodeError("--seeds: at least 2 random input sets are needed to catch replayed results")
    return CheckConfig(
        device=ns.device,
        atol=ns.atol,
        rtol=ns.rtol,
        min_speedup=ns.min_speedup if ns.min_speedup is not None else 1.05,
        timeout=ns.timeout,
        build_timeout=ns.build_timeout,
        max_memory=ns.max_memory,
        seed=ns.seed,
        n_seeds=ns.seeds,
        time_budget=ns.time_budget,
        timer=ns.timer,
        cxxflags=shlex.split(ns.cxxflags) if ns.cxxflags is not None else None,
        nvccflags=shlex.split(ns.nvccflags) if ns.nvccflags is not None else None,
        jobs=ns.jobs,
        inplace=ns.inplace,
    )


def cmd_check(ns: argparse.Namespace) -> int:
    from .oracle.check import CandidateSpec, Oracle
    from .oracle.reference import parse_reference
    from .oracle.sandbox import hide_own_environment
    from .store import Store, default_path

    reference = parse_reference(ns.reference, ns.inputs)
    candidates = [CandidateSpec.from_path(p) for p in ns.candidates]
    config = _config(ns)
    hide_own_environment()
    root = Path.cwd()
    console = _console()
    progress = (lambda msg: console.log(msg)) if (console and not ns.json) else None
    with Store(default_path(root)) as store:
        run_id = store.begin_run(" ".join(["maxcode", *sys.argv[1:]]), __version__)
        oracle = Oracle(reference, config, root, store=store, run_id=run_id, progress=progress, candidates_hint=candidates)
        oracle.start_builds(candidates)
        with oracle:
            verdicts = oracle.check(candidates)
        store.finish_run(run_id)
    if ns.json:
        json.dump([v.to_json() for v in verdicts], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_verdicts(verdicts, oracle.workloads, oracle.device)
    return 0 if all(v.correct for v in verdicts) else 1


def _console():
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(stderr=True)


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _print_verdicts(verdicts, workloads, device: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"maxcode check ({device})", show_lines=False)
    for col in ("candidate", "status", "speedup", "95% CI", "reference", "candidate time", "build"):
        table.add_column(col)
    for v in verdicts:
        ci = f"[{v.speedup_ci[0]:.3g}, {v.speedup_ci[1]:.3g}]" if v.speedup_ci else "-"
        sp = f"{v.speedup:.3g}x" if v.speedup is not None else "-"
        status = v.status + (" (weak check)" if v.weak_check else "")
        table.add_row(
            os.path.basename(v.candidate),
            f"[{STATUS_STYLE[v.status]}]{status}[/]",
            sp,
            ci,
            _fmt_s(v.reference_s),
            _fmt_s(v.candidate_s),
            _fmt_s(v.compile_s),
        )
    console.print(table)
    for v in verdicts:
        if v.reasons:
            console.print(f"[bold]{os.path.basename(v.candidate)}[/]: {v.status}", highlight=False)
            for r in v.reasons:
                console.print(f"  {r}", highlight=False, markup=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        if ns.command == "check":
            return cmd_check(ns)
        if ns.command == "status":
            return cmd_status(ns)
        if ns.command == "apply":
            return cmd_apply(ns)
    except MaxcodeError as e:
        sys.stderr.write(f"maxcode: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("maxcode: interrupted; finished evaluations are in .maxcode/maxcode.db\n")
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
