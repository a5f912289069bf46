"""The ``maxcode`` command. A thin front end: options come from ``options``, work from the layers."""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import options
from ._extras import require
from ._files import write_atomic
from ._styles import STATUS_STYLE, terminal_safe
from ._version import __version__
from .apply import apply_report
from .bench import kernelbench, pie
from .bench.ablation import OBSERVATIONS, ablate, markdown_table
from .bot.github import client
from .bot.memory import DEFAULT_REJECT_MARGIN as REJECT_MARGIN
from .bot.memory import status_lines
from .bot.pr import DEFAULT_AUTHOR, DEFAULT_MAX_WAIT, Bot
from .bot.pr import DEFAULT_REPLACE_MARGIN as REPLACE_MARGIN
from .errors import MaxcodeError
from .model.report import parse_report
from .remeasure import measurable_here
from .report import REMEASURE_REPEATS, fmt_time, remeasure_command, remeasure_text, validate
from .report.tree import best_node, render_tree
from .sandbox.env import hide_own_environment
from .tables import DEFAULT_RUNS, Regressions
from .targets.accept import reference_hash_in_file
from .targets.dispatch import entry_state
from .targets.lock import find_lock, read_lock

if TYPE_CHECKING:
    from .bot.compare import CompareResult


#: what ``add_subparsers`` returns: each ``_add_<command>`` adds its command's parser to it
Subcommands = argparse._SubParsersAction


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other usage error
        self.exit(2, f"maxcode: error: {message} (see 'maxcode {self.prog.split()[-1]} --help')\n")


def _regression_arguments(p: argparse.ArgumentParser) -> None:
    """The options ``compare`` and ``bench-ab`` share: the threshold, the outputs, the exit status."""
    p.add_argument("--threshold", type=options.positive_float, metavar="F", help="slowdown that counts, as a fraction (0.1 = 10%%)")
    p.add_argument("--markdown", metavar="PATH", help="also write the markdown table here")
    p.add_argument("--json", metavar="PATH", help="also write the comparison as JSON here")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any benchmark regressed")
    p.add_argument("--profile", metavar="NAME", help="read [tool.maxcode.profiles.NAME] regressions over [tool.maxcode]'s")


def _history_arguments(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Where ``bench-ab`` and ``bench-record`` keep a branch's figures, and under which branch name."""
    p.add_argument("--history", metavar="PATH", required=required,
                   help="a JSON file of stored figures per commit (created when missing): bench-ab adds the base's "
                        "figures to it and shows each benchmark's trend")
    p.add_argument("--branch", metavar="NAME", help="the branch the stored figures belong to (default: the base ref, "
                                                    "without origin/)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="maxcode", description="Verified C++/CUDA speedups for hot PyTorch and C++ code.")
    parser.add_argument("--version", action="version", version=f"pytest-maxcode {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_check(sub)
    _add_status(sub)
    _add_apply(sub)
    _add_show(sub)
    _add_value(sub)
    _add_compare(sub)
    _add_bench_ab(sub)
    _add_bench_record(sub)
    _add_pr(sub)
    _add_comment(sub)
    _add_bench(sub)
    _add_ablate(sub)
    _add_remeasure(sub)
    return parser


def _add_check(sub: Subcommands) -> None:
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
    check.add_argument("--repeat", type=options.positive_int, metavar="N",
                       help="then measure each correct candidate N more times, each in a fresh oracle with a fresh seed, "
                            "and say how many of those speedups fell inside the quoted interval")
    options.add_to_argparse(check, options.CHECK)


def _add_status(sub: Subcommands) -> None:
    status = sub.add_parser(
        "status",
        help="list every locked target as active, stale, missing or device-mismatch",
        description=(
            "Read the nearest maxcode.lock and say, for each target, whether its kernel would run here. "
            "Exit status 1 when any kernel is stale or missing (re-run pytest --maxcode), else 0."
        ),
    )
    status.add_argument("--json", action="store_true", help="print a JSON array instead of a table")


def _add_apply(sub: Subcommands) -> None:
    apply = sub.add_parser(
        "apply",
        help="write the verified kernels of a saved report into maxcode_kernels/ and maxcode.lock",
        description="Apply every verified target of a report written by pytest --maxcode. Exit status 1 when none was applied.",
    )
    apply.add_argument("report", nargs="?", default=".maxcode/reports/report.json", metavar="REPORT", help="default: .maxcode/reports/report.json")


def _add_show(sub: Subcommands) -> None:
    show = sub.add_parser(
        "show",
        help="print a target's search tree, a node's source, or the prompt and reply behind a node",
        description=(
            "Read the store (.maxcode/maxcode.db in this folder or the nearest one above that has .maxcode/). "
            "Without TARGET: list the searched targets. With TARGET (an id, or a glob or substring matching "
            "exactly one): print its search tree, one line per node. --source and --prompt take a node id "
            "(the #N of the tree)."
        ),
    )
    show.add_argument("target", nargs="?", metavar="TARGET", help="a target id, or a glob or substring matching exactly one")
    show.add_argument("--run", default="latest", metavar="N|latest|all",
                      help="which run's tree: a run id, latest (default: the latest run that searched TARGET) or all")
    what = show.add_mutually_exclusive_group()
    what.add_argument("--source", type=int, metavar="NODE", help="print the candidate source of node NODE")
    what.add_argument("--prompt", type=int, metavar="NODE", help="print the prompt and the model's reply behind node NODE")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.add_argument("--store", metavar="PATH", help="the store file (default: .maxcode/maxcode.db here or above)")


def _add_value(sub: Subcommands) -> None:
    value = sub.add_parser(
        "value",
        help="the reward-to-go model: train it on the stored search trees, evaluate it, export training pairs",
        description=(
            "Each stored node's label is the best discounted reward on any path from it down. 'train' fits a "
            "light model (scikit-learn) on node features and saves it under .maxcode/value/; 'eval' holds whole "
            "trees out and compares the model's ranking with the no-model baseline; 'export' writes JSONL "
            "prompt/answer pairs for fine-tuning a generative reward-to-go model."
        ),
    )
    value.add_argument("action", choices=("train", "eval", "export"))
    value.add_argument("--gamma", type=options.positive_float, default=0.9, metavar="G", help="discount per step, in (0, 1] (default 0.9)")
    value.add_argument("--holdout", type=options.positive_float, default=0.3, metavar="F", help="eval: share of trees held out (default 0.3)")
    value.add_argument("--seed", type=int, default=0, metavar="N", help="eval: seed of the tree split (default 0)")
    value.add_argument("--out", metavar="PATH", help="export: the JSONL file (default .maxcode/value/rtg.jsonl)")
    value.add_argument("--json", action="store_true", help="print JSON instead of text")
    value.add_argument("--store", metavar="PATH", help="the store file (default: .maxcode/maxcode.db here or above)")


def _add_compare(sub: Subcommands) -> None:
    cmp = sub.add_parser(
        "compare",
        help="compare two benchmark runs: a regression is a significant slowdown beyond the threshold",
        description=(
            "BASE and HEAD are pytest-benchmark JSON files (pytest --benchmark-json=PATH, which holds the raw "
            "timings: the test is then Mann-Whitney U) or maxcode reports. Prints a markdown table. Thresholds: "
            "--threshold, else [tool.maxcode.regressions] threshold and per-benchmark thresholds (globs) in "
            "pyproject.toml, else 10%. Exit status 1 with --fail-on-regression when anything regressed."
        ),
    )
    cmp.add_argument("base", metavar="BASE")
    cmp.add_argument("head", metavar="HEAD")
    _regression_arguments(cmp)


def _add_bench_ab(sub: Subcommands) -> None:
    ab = sub.add_parser(
        "bench-ab",
        help="regressions measured base and head alternately: short benchmark runs of each, one sample per process",
        description=(
            "Checks out BASE_REF and HEAD_REF side by side (git worktrees: this checkout is not touched) and runs "
            "the benchmarks (pytest-benchmark's fixture) in each alternately, ABBA..., in --runs short processes per "
            "side; each process's fastest round is one sample. A regression is a slowdown beyond the threshold that "
            "a one-sided Mann-Whitney test on those samples finds beyond the threshold (Holm-corrected). --timer instructions counts "
            "instructions under valgrind instead (deterministic: one run per side, the threshold decides). "
            "Thresholds, timer and runs: the options, else [tool.maxcode.regressions], else 10%, time, 7. "
            "Arguments after -- go to pytest. Exit status 1 with --fail-on-regression when anything regressed."
        ),
    )
    ab.add_argument("base", metavar="BASE_REF")
    ab.add_argument("head", metavar="HEAD_REF")
    ab.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG", help="after --: what pytest runs (e.g. -- tests/bench -k matmul)")
    ab.add_argument("--runs", type=options.positive_int, metavar="N", help=f"processes per side (default: [tool.maxcode.regressions] runs, else {DEFAULT_RUNS})")
    ab.add_argument("--timer", choices=("time", "instructions"), help="wall time (default) or instruction counts under valgrind")
    _fork_server_argument(ab)
    _history_arguments(ab)
    ab.add_argument("--head-label", metavar="TEXT",
                    help="how the table names the head (default: HEAD_REF); the action names a pull request's own head "
                         "commit this way when what it measures is GitHub's merge of it into the base")
    ab.add_argument("--baseline", choices=("rerun", "stored"), default="rerun",
                    help="stored: take the base's figures from --history when it holds the base commit measured the same "
                         "way (then only the head runs); rerun (default): measure both")
    _regression_arguments(ab)


def _add_bench_record(sub: Subcommands) -> None:
    rec = sub.add_parser(
        "bench-record",
        help="measure one commit's benchmarks and store them in a history file (for bench-ab --baseline stored and trends)",
        description=(
            "Runs REF's benchmarks (pytest-benchmark's fixture) in --runs short processes, in a git worktree, and adds "
            "each benchmark's per-process figures to --history under REF's commit and --branch. CI runs this on pushes to "
            "the main branch, so that pull requests compare against stored figures and show a trend. Arguments after -- "
            "go to pytest."
        ),
    )
    rec.add_argument("ref", metavar="REF")
    rec.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG", help="after --: what pytest runs")
    rec.add_argument("--runs", type=options.positive_int, metavar="N", help=f"processes (default: [tool.maxcode.regressions] runs, else {DEFAULT_RUNS})")
    rec.add_argument("--timer", choices=("time", "instructions"), help="wall time (default) or instruction counts under valgrind")
    rec.add_argument("--profile", metavar="NAME", help="read [tool.maxcode.profiles.NAME] regressions over [tool.maxcode]'s")
    _fork_server_argument(rec)
    _history_arguments(rec, required=True)


def _fork_server_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fork-server", action=argparse.BooleanOptionalAction,
                        help="fork each run from a server per side that started pytest and collected the tests once, so "
                             "start-up is paid once; --no-fork-server: a new interpreter per run (default: "
                             "[tool.maxcode.regressions] fork_server, else forked)")


def _add_pr(sub: Subcommands) -> None:
    pr = sub.add_parser(
        "pr",
        help="open or update one pull request per verified target of a report",
        description=(
            "For each verified target (not weak-check, not unverified): apply its kernel on top of BASE in a throwaway "
            "worktree, commit it as --author, force-push it to maxcode/optimize-<target>, and open the pull request for "
            "that branch or update the open one. A pull request closed without merging is not reopened for the same "
            "kernel. The token is read from GITHUB_TOKEN, the API from GITHUB_API_URL or --github-url. Exit status 1 "
            "when a target failed."
        ),
    )
    pr.add_argument("report", nargs="?", default=".maxcode/reports/report.json", metavar="REPORT", help="default: .maxcode/reports/report.json")
    pr.add_argument("--repo", metavar="OWNER/NAME", help="the GitHub repository (default: $GITHUB_REPOSITORY)")
    pr.add_argument("--base", metavar="BRANCH", help="the branch the pull requests go into (default: the repository's default branch)")
    pr.add_argument("--remote", default="origin", metavar="NAME", help="the git remote to push to (default origin)")
    pr.add_argument("--author", default=None, metavar="'NAME <EMAIL>'", help="commit author (default: $MAXCODE_GIT_AUTHOR or maxcode-bot)")
    pr.add_argument("--draft", action="store_true", help="open pull requests as drafts")
    pr.add_argument("--label", action="append", default=[], metavar="NAME", help="add this label (repeatable)")
    pr.add_argument("--dry-run", action="store_true", help="print what would be pushed and opened; touch nothing")
    pr.add_argument("--urls-file", metavar="PATH", help="write the URLs of the pull requests opened or updated here, one a line")
    pr.add_argument("--github-url", metavar="URL", help="the REST API's base URL (default: $GITHUB_API_URL or https://api.github.com)")
    _add_bot_limits(pr)


def _add_comment(sub: Subcommands) -> None:
    comment = sub.add_parser(
        "comment",
        help="post a markdown file as the pull request's one maxcode comment, edited in place on later runs",
        description="The comment is found again by a hidden marker and edited, never duplicated. The token is read from GITHUB_TOKEN.",
    )
    comment.add_argument("file", metavar="MARKDOWN")
    comment.add_argument("--repo", metavar="OWNER/NAME", help="the GitHub repository (default: $GITHUB_REPOSITORY)")
    comment.add_argument("--pr", type=int, required=True, metavar="N", help="the pull request's number")
    comment.add_argument("--marker", default="maxcode:regressions", metavar="NAME", help="which maxcode comment this is (default maxcode:regressions)")
    comment.add_argument("--github-url", metavar="URL", help="the REST API's base URL (default: $GITHUB_API_URL or https://api.github.com)")
    _add_max_wait(comment)


def _add_bench(sub: Subcommands) -> None:
    bench = sub.add_parser(
        "bench",
        help="the field's benchmarks: KernelBench problems, PIE programs",
        description="Run a benchmark suite with the field's metrics; each writes a JSON result and a markdown table.",
    )
    suites = bench.add_subparsers(dest="suite", required=True, parser_class=_Parser)
    kernelbench.add_arguments(suites.add_parser("kernelbench", help="KernelBench: correctness, fast_p, geomean speedup vs eager and torch.compile",
                                                description=kernelbench.DESCRIPTION))
    pie.add_arguments(suites.add_parser("pie", help="PIE: C++ programs on stdin/stdout test cases; mean speedup, %%Opt, correctness",
                                        description=pie.DESCRIPTION))


def _add_ablate(sub: Subcommands) -> None:
    ablate = sub.add_parser(
        "ablate",
        help="search the project's targets under each observation and rerank setting, equal budgets, several seeds",
        description=(
            "Run pytest --maxcode once per (observation, rerank, seed), one run after another, each with the same "
            "evaluation budget per target, and write a table and a plot of the best verified speedup against the "
            "budget to .maxcode/ablation/<time>/ (or --out). Arguments after -- go to pytest (test paths, -k). "
            "Works with any model, including cassettes: --record DIR records one per run, --llm replay:DIR replays them."
        ),
    )
    ablate.add_argument("--observations", default=",".join(OBSERVATIONS), metavar="LIST",
                        help=f"comma-separated observation settings (default {','.join(OBSERVATIONS)})")
    ablate.add_argument("--reranks", default="none", metavar="LIST", help="comma-separated rerank settings: none, light, llm (default none)")
    ablate.add_argument("--seeds", type=options.positive_int, default=3, metavar="N", help="seeds per setting (default 3)")
    ablate.add_argument("--budget", type=options.positive_int, default=8, metavar="N", help="evaluations per target in every run (default 8)")
    ablate.add_argument("--llm", metavar="SPEC", help="the model, as --maxcode-llm; replay:DIR replays the cassettes of --record DIR")
    ablate.add_argument("--record", metavar="DIR", help="record each run's model replies to DIR/<run>.jsonl")
    ablate.add_argument("--out", metavar="DIR", help="where the table, plot and run reports go (default .maxcode/ablation/<time>/)")
    ablate.add_argument("--run-timeout", type=options.positive_float, metavar="SECONDS", help="stop a run that takes longer (default: none)")
    ablate.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    ablate.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to each pytest run")




def _add_max_wait(p: argparse.ArgumentParser) -> None:
    """The rate-limit wait of every command that talks to GitHub."""
    p.add_argument("--max-wait", type=options.positive_float, default=DEFAULT_MAX_WAIT, metavar="SECONDS",
                   help=f"the longest wait for GitHub's rate limit to reset (default {DEFAULT_MAX_WAIT:g}); a later reset "
                        "ends the run with one line saying when")


def _add_bot_limits(pr: argparse.ArgumentParser) -> None:
    """``maxcode pr``'s waits and the margins of the bot's memory."""
    _add_max_wait(pr)
    pr.add_argument("--reject-margin", type=options.positive_float, default=REJECT_MARGIN, metavar="F",
                    help=f"after a PR was closed unmerged, propose the target again only when a kernel's interval starts at this "
                         f"factor over the rejected speedup, or its reference changed (default {REJECT_MARGIN:g})")
    pr.add_argument("--replace-margin", type=options.positive_float, default=REPLACE_MARGIN, metavar="F",
                    help=f"replace the base branch's accepted kernel only when the new interval starts above the accepted "
                         f"kernel's interval and at this factor over its speedup, both as measured in the same run (else as "
                         f"its lock entry quotes them) (default {REPLACE_MARGIN:g})")


def _add_remeasure(sub: Subcommands) -> None:
    remeasure = sub.add_parser(
        "remeasure",
        help="time a report's quoted speedup again, N times in fresh processes, and say how many repeats fell inside its interval",
        description=(
            "Run from the project's root after pytest --maxcode: times the report's best kernel for TARGET against the "
            "reference on the inputs the tests gave it (.maxcode/inputs/TARGET), N times, each in a fresh oracle with a "
            "fresh seed. Exit status 0 when at least 80%% of the repeats fell inside the quoted interval, 1 when fewer "
            "did (the claim does not reproduce here), 2 for a usage error."
        ),
    )
    remeasure.add_argument("target", metavar="TARGET")
    remeasure.add_argument("--repeat", type=options.positive_int, default=REMEASURE_REPEATS, metavar="N",
                           help=f"how many repeats (default {REMEASURE_REPEATS})")
    remeasure.add_argument("--sandbox", default="auto", choices=("auto", "bwrap", "unshare", "none"),
                           help="the candidates' OS sandbox, as for maxcode check (default auto)")


def cmd_remeasure(ns: argparse.Namespace) -> int:
    from .remeasure import holds, remeasure  # the oracle and torch: keeps start-up fast

    hide_own_environment()
    console = _console()
    progress = _log(console)
    r = remeasure(Path.cwd(), ns.target, ns.repeat, sandbox=ns.sandbox, progress=progress)
    print(terminal_safe("\n".join(r.lines())))
    return 0 if holds(r) else 1


def cmd_apply(ns: argparse.Namespace) -> int:
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
    lines = apply_report(parse_report(report, str(path)), root)
    for line in lines:
        print(terminal_safe(line))
    return 0 if any(": applied " in line or ": rewrote " in line for line in lines) else 1


def cmd_status(ns: argparse.Namespace) -> int:
    lock = find_lock(Path.cwd())
    held_back = status_lines(lock.parent if lock else Path.cwd())
    aside = sys.stderr if ns.json else sys.stdout  # the held-back lines: beside the JSON, which stays the lock's rows
    if lock is None:
        sys.stderr.write("maxcode: no maxcode.lock here or above; no kernel is accepted yet\n")
        if ns.json:
            print("[]")
        for line in held_back:
            print(line, file=aside)
        return 0
    try:
        entries = read_lock(lock)
    except ValueError as e:
        raise MaxcodeError(str(e)) from None
    root = lock.parent
    # the decorator's own test (targets/decorator.py _register): under it, every target runs its reference
    disabled = os.environ.get("MAXCODE_DISABLE", "") not in ("", "0")
    measured = measurable_here(root)
    rows = []
    for target, entry in sorted(entries.items()):
        ref_file, qualname = entry.extra.get("reference_file"), entry.extra.get("qualname")
        current = reference_hash_in_file(root / ref_file, qualname) if ref_file and qualname else None
        state, why = entry_state(entry, root, current)
        row = {"target": target, "state": state, "reason": why, "kernel": entry.kernel, "speedup": entry.speedup,
               "speedup_ci": entry.speedup_ci, "remeasure": None}
        quoted = measured.get(target)
        if quoted is not None and quoted[0] == entry.kernel_hash and state == "active":
            row["remeasure"] = {"command": _cd(root, Path.cwd()) + remeasure_command(target), "expect": quoted[1]}
        if disabled:
            row.update(state="disabled", reason=f"MAXCODE_DISABLE is set: the reference runs (else {state}: {why})", lock_state=state)
        rows.append(row)
    if ns.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        # rich loads when a table is printed: keeps start-up fast
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=str(lock))
        table.add_column("target", overflow="fold")
        table.add_column("state", no_wrap=True)
        table.add_column("kernel", overflow="fold")
        table.add_column("speedup", justify="right", no_wrap=True)
        table.add_column("why", overflow="fold", ratio=1)
        style = {"active": "green", "stale": "red", "missing": "red", "device-mismatch": "yellow", "disabled": "yellow"}
        for r in rows:
            table.add_row(Text(terminal_safe(r["target"])), Text(r["state"], style=style[r["state"]]),
                          Text(terminal_safe(r["kernel"])), f"{r['speedup']:.3g}x", Text(terminal_safe(r["reason"])))
        Console().print(table)
        for line in _remeasure_lines(rows):
            print(line)
    for line in held_back:
        print(line, file=aside)
    return 1 if any(r.get("lock_state", r["state"]) in ("stale", "missing") for r in rows) else 0


def _remeasure_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Under the status table: each active speedup's re-measure command and where its repeats
    should land, one line each way (the table keeps 80 columns), or why there is none here."""
    out = []
    for r in rows:
        said = remeasure_text(r)
        if said is not None:
            out += [f"re-measure {r['target']}: {said[0]}", f"  ({said[1]})"]
    missing = [r for r in rows if r["remeasure"] is None and r["state"] == "active"]
    if missing:
        out += [f"{len(missing)} active target(s) cannot be re-measured here: that needs the",
                "  report of a pytest --maxcode run that quotes the lock's kernel, and its inputs"]
    return out


def _cd(folder: Path | str, start: Path | str) -> str:
    """``cd FOLDER && `` (relative to ``start``) for a printed command that must run in ``folder``;
    '' where that is ``start`` itself."""
    rel = os.path.relpath(folder, start)
    return "" if rel == "." else f"cd {shlex.quote(rel)} && "


def _find_store(given: str | None) -> Path:
    """The store to read: --store, else .maxcode/maxcode.db in the nearest folder (this one or above) with .maxcode/."""
    from .store import default_path  # sqlite3 and the store: keeps start-up fast

    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise MaxcodeError(f"{path}: no such store; run pytest --maxcode first")
        return path
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / ".maxcode").is_dir():
            path = default_path(folder)
            if not path.is_file():
                raise MaxcodeError(f"{path}: no store yet; run pytest --maxcode first")
            return path
    raise MaxcodeError("no .maxcode/maxcode.db here or in any folder above; run pytest --maxcode first")


def _match_target(pattern: str, ids: list[str]) -> str:
    """An exact id, else the one id a glob (with * ? [) or a substring matches."""
    if pattern in ids:
        return pattern
    if any(c in pattern for c in "*?["):
        found = [t for t in ids if fnmatch.fnmatchcase(t, pattern)]
    else:
        found = [t for t in ids if pattern in t]
    if len(found) == 1:
        return found[0]
    known = ", ".join(found if found else ids) or "none"
    if found:
        raise MaxcodeError(f"{pattern!r} matches {len(found)} targets: {known}; give one exactly")
    raise MaxcodeError(f"no target matches {pattern!r} (targets in the store: {known})")


def _select_run(store, target: str, spec: str) -> int | None:
    """The run id to show (None: every run) for --run N|latest|all."""
    runs = sorted({n["run_id"] for n in store.nodes(target) if n["run_id"] is not None})
    if spec == "all":
        return None
    if spec == "latest":
        return runs[-1] if runs else None
    try:
        run = int(spec)
    except ValueError:
        raise MaxcodeError(f"--run: {spec!r} is not a run id, latest or all") from None
    if run not in runs:
        raise MaxcodeError(f"run {run} did not search {target} (runs that did: {', '.join(map(str, runs)) or 'none'})")
    return run


def _dump_json(value) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _node(store, node_id: int, target: str | None) -> dict:
    """Node ``node_id`` (ids are global to the store); when TARGET was given too, it must be that target's."""
    n = store.node(node_id)
    if n is None:
        raise MaxcodeError(f"no node #{node_id} in {store.path}")
    if target is not None and n["target_id"] != target:
        raise MaxcodeError(f"node #{node_id} belongs to {n['target_id']}, not {target}")
    return n


def _write_text(text: str) -> None:
    """A stored text as it is (source, a prompt, a reply) into a pipe or a file; on a terminal with
    its controls escaped, since a candidate or a model wrote it."""
    sys.stdout.write(terminal_safe(text) if sys.stdout.isatty() else text)


def _show_source(store, node: dict, as_json: bool) -> int:
    cand = store.candidate(node["candidate_hash"]) if node["candidate_hash"] else None
    if cand is None:
        why = f": {node['reasons'][0]}" if node["reasons"] else ""
        raise MaxcodeError(f"node #{node['id']} has no candidate source (status {node['status']}{why}); try --prompt {node['id']}")
    if as_json:
        _dump_json(cand)
    else:
        _write_text(cand["source"] if cand["source"].endswith("\n") else cand["source"] + "\n")
    return 0


def _show_prompt(store, node: dict, as_json: bool) -> int:
    if node["llm_call_id"] is None:
        line = f"node #{node['id']} has no LLM call: it came from the {node['policy']} policy (origin {node['origin']})"
        if as_json:
            _dump_json({"node": node["id"], "llm_call": None, "policy": node["policy"], "origin": node["origin"]})
        else:
            print(line)
        return 0
    call = store.llm_call(node["llm_call_id"])
    if call is None:
        raise MaxcodeError(f"node #{node['id']}: LLM call {node['llm_call_id']} is missing from {store.path}")
    if as_json:
        _dump_json(call)
        return 0
    req = call["request"] if isinstance(call["request"], dict) else {}
    tokens = call["input_tokens"] + call["output_tokens"]
    out = [
        f"node #{node['id']}: {call['provider']} {call['model']} ({call['source']}{', scripted' if call['scripted'] else ''}, "
        f"{tokens} tokens, ${call['cost_usd']:.4f}, {call['latency_s']:.1f} s)",
        "settings: " + ", ".join(f"{k} {req[k]}" for k in ("max_tokens", "temperature", "thinking_tokens", "sample") if req.get(k) is not None),
    ]
    if req.get("system"):
        out += ["", "=== system ===", str(req["system"]).rstrip("\n")]
    for m in req.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else m
        if not isinstance(content, str):  # structured content blocks: keep their text
            content = "\n".join(b.get("text", json.dumps(b)) if isinstance(b, dict) else str(b) for b in (content or []))
        out += ["", f"=== {m.get('role', '?') if isinstance(m, dict) else '?'} ===", content.rstrip("\n")]
    out += ["", "=== reply ===", str(call["response"]).rstrip("\n")]
    _write_text("\n".join(out) + "\n")
    return 0


def _list_targets(store, run: int | None, as_json: bool) -> int:
    rows = []
    for target in store.target_ids():
        nodes = store.nodes(target, run)
        if not nodes:
            continue
        correct = [n["speedup"] for n in nodes if n["status"] == "faster" and n["speedup"] is not None]  # only faster is "best"
        runs = sorted({n["run_id"] for n in nodes if n["run_id"] is not None})
        rows.append({
            "target": target, "runs": len(runs), "latest_run": runs[-1] if runs else None, "nodes": len(nodes),
            "best_speedup": max(correct) if correct else None,
            "cost_usd": store.llm_totals(run_id=run, target_id=target)["cost_usd"],
        })
    if as_json:
        _dump_json(rows)
        return 0
    if not rows:
        print(f"no search trees in {store.path} yet; run pytest --maxcode")
        return 0
    # rich loads when a table is printed: keeps start-up fast
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=str(store.path))
    table.add_column("target", overflow="fold")
    for col in ("runs", "last run", "nodes", "best", "cost"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        best = f"{r['best_speedup']:.2f}x" if r["best_speedup"] is not None else "-"
        table.add_row(Text(terminal_safe(r["target"])), str(r["runs"]), str(r["latest_run"] or "-"), str(r["nodes"]), best, f"${r['cost_usd']:.4f}")
    Console().print(table)
    return 0


def cmd_value(ns: argparse.Namespace) -> int:
    # sqlite3, the store and the value model: keeps start-up fast
    from .store import Store
    from .value import model as vm

    if ns.gamma > 1:
        raise MaxcodeError(f"--gamma {ns.gamma}: the discount must be in (0, 1]")
    path = _find_store(ns.store)
    value_dir = path.parent / "value"
    with Store(path) as store:
        rows = vm.load_rows(store, ns.gamma)
    if ns.action == "train":
        saved = vm.save(vm.fit(rows), value_dir, gamma=ns.gamma, rows=rows)
        summary = {"model": str(saved), "nodes": len(rows), "trees": len({r.tree for r in rows}), "gamma": ns.gamma}
        print(json.dumps(summary) if ns.json else f"trained on {summary['nodes']} node(s) from {summary['trees']} tree(s): {saved}")
        return 0
    if ns.action == "eval":
        result = vm.evaluate(rows, ns.holdout, ns.seed)
        if ns.json:
            print(json.dumps(result, indent=2))
            return 0

        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        m, b = result["model"], result["baseline"]
        print(f"held out {result['trees']['test']} of {sum(result['trees'].values())} tree(s), "
              f"{result['sibling_groups']} group(s) of competing proposals")
        print(f"model:    top-1 {f(m['top1'])}  Spearman (siblings) {f(m['spearman_siblings'])}  Spearman (all) {f(m['spearman_all'])}")
        print(f"baseline: top-1 {f(b['top1'])}  Spearman (siblings) {f(b['spearman_siblings'])}  Spearman (all) {f(b['spearman_all'])}  ({b['name']})")
        return 0
    out = Path(ns.out) if ns.out else value_dir / "rtg.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    n = vm.export_jsonl(rows, out, ns.gamma)
    print(json.dumps({"pairs": n, "path": str(out)}) if ns.json else f"wrote {n} prompt/answer pair(s) to {out}")
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    # sqlite3 and the store load when a store is read: keeps start-up fast
    import sqlite3

    from .store import Store  # keeps start-up fast, as sqlite3 does

    path = _find_store(ns.store)
    try:
        store = Store(path)
    except sqlite3.DatabaseError as e:
        raise MaxcodeError(f"{path}: not a maxcode store ({e})") from None
    with store:
        ids = store.target_ids()
        target = _match_target(ns.target, ids) if ns.target is not None else None
        if ns.source is not None:
            return _show_source(store, _node(store, ns.source, target), ns.json)
        if ns.prompt is not None:
            return _show_prompt(store, _node(store, ns.prompt, target), ns.json)
        if target is None:
            run = None
            if ns.run not in ("latest", "all"):
                try:
                    run = int(ns.run)
                except ValueError:
                    raise MaxcodeError(f"--run: {ns.run!r} is not a run id, latest or all") from None
            return _list_targets(store, run, ns.json)
        run = _select_run(store, target, ns.run)
        nodes = store.nodes(target, run)
        costs: dict[int, float] = {}
        for n in nodes:
            if n["llm_call_id"] is not None and n["llm_call_id"] not in costs:
                call = store.llm_call(n["llm_call_id"])
                costs[n["llm_call_id"]] = float(call["cost_usd"]) if call else 0.0
        if ns.json:
            _dump_json([dict(n, cost_usd=costs.get(n["llm_call_id"], 0.0) if n["llm_call_id"] is not None else 0.0) for n in nodes])
            return 0
        # rich loads when a tree is drawn: keeps start-up fast
        from rich.console import Console
        from rich.text import Text

        console = Console()
        render_tree(nodes, console, costs)
        totals = store.llm_totals(run_id=run, target_id=target)
        top = best_node(nodes)
        best = f"{top['speedup']:.2f}x (#{top['id']})" if top is not None and top["speedup"] is not None else "none correct"
        info = store.run(run) if run is not None else None
        ended = f" (run {run} {info['status']})" if info and info.get("status") in ("interrupted", "killed", "running") else ""
        console.print(Text(
            f"{len(nodes)} node(s){ended}, best {best}, cost ${totals['cost_usd']:.4f}, {int(totals['tokens'])} tokens, "
            f"{int(totals['calls'])} LLM call(s) ({int(totals['api_calls'])} to the API)"
        ))
        for line in _remeasure_best(store, path, target, top):
            console.print(Text(line))
    return 0


def _remeasure_best(store: Any, path: Path, target: str, top: dict[str, Any] | None) -> list[str]:
    """The re-measure command for the best node and where its repeats should land (two lines:
    80 columns), where the project's last report quotes that same kernel and its inputs are here."""
    if top is None or not top["candidate_hash"] or path.parent.name != ".maxcode":
        return []
    root = path.parent.parent
    quoted = measurable_here(root).get(target)
    cand = store.candidate(top["candidate_hash"])
    if quoted is None or cand is None or hashlib.sha256(cand["source"].encode()).hexdigest() != quoted[0]:
        return []
    said = remeasure_text({"remeasure": {"command": _cd(root, Path.cwd()) + remeasure_command(target), "expect": quoted[1]}})
    return [f"re-measure #{top['id']}: {said[0]}", f"  ({said[1]})"] if said else []


def _check_settings(ns: argparse.Namespace, candidate_paths: Sequence[str]) -> options.Settings:
    """``maxcode check``'s settings: its options, over ``[tool.maxcode]`` and the profile
    when ``--profile`` names one (without it no file is read). An unset device is CUDA when a
    candidate is a .cu file and a GPU is present, else the CPU."""
    pyproject = Path.cwd() / "pyproject.toml" if ns.profile is not None else None
    auto = "cpu"
    if any(Path(p).suffix == ".cu" for p in candidate_paths):
        import torch  # only to look for a GPU: keeps start-up fast

        auto = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return options.load_settings({o.name: getattr(ns, o.name) for o in options.for_scope(options.CHECK)}, pyproject,
                                     auto_device=auto)
    except ValueError as e:
        raise MaxcodeError(str(e)) from None


def _config(settings: options.Settings):
    from .oracle.check import CheckConfig  # with torch: keeps start-up fast

    if settings.seeds < 2:
        raise MaxcodeError("--seeds: at least 2 random input sets are needed to catch replayed results")
    return CheckConfig(
        device=settings.device,
        atol=settings.atol,
        rtol=settings.rtol,
        min_speedup=settings.min_speedup,
        timeout=settings.timeout,
        build_timeout=settings.build_timeout,
        max_memory=settings.max_memory,
        seed=settings.seed,
        n_seeds=settings.seeds,
        time_budget=settings.time_budget,
        timer=settings.timer,
        cxxflags=shlex.split(settings.cxxflags) if settings.cxxflags is not None else None,
        nvccflags=shlex.split(settings.nvccflags) if settings.nvccflags is not None else None,
        jobs=settings.jobs,
        inplace=settings.inplace,
        sandbox=settings.sandbox,
    )


def cmd_check(ns: argparse.Namespace) -> int:
    # the oracle (torch with it) and the store load when a check runs: keeps start-up fast
    from .oracle.check import CandidateSpec, Oracle
    from .oracle.reference import parse_reference
    from .store import Store, default_path

    settings = _check_settings(ns, ns.candidates)
    reference = parse_reference(ns.reference, ns.inputs)
    candidates = [CandidateSpec.from_path(p) for p in ns.candidates]
    config = _config(settings)
    hide_own_environment()
    root = Path.cwd()
    console = _console()
    progress = _log(console) if not settings.json else None
    with Store(default_path(root)) as store:
        run_id = store.begin_run(" ".join(["maxcode", *sys.argv[1:]]), __version__)
        oracle = Oracle(reference, config, root, store=store, run_id=run_id, progress=progress, candidates_hint=candidates)
        try:
            oracle.start_builds(candidates)
            with oracle:
                verdicts = oracle.check(candidates)
        except KeyboardInterrupt:
            store.finish_run(run_id, "interrupted")
            raise
        store.finish_run(run_id)
    for cand, v in zip(ns.candidates, verdicts):
        if v.correct and v.speedup_ci:  # how to check the quoted speedup, in every output
            v.diagnostics["remeasure"] = {"command": _remeasure_command(sys.argv[1:], ns.candidates, cand),
                                          "expect": list(v.speedup_ci)}
    repeats = []
    if ns.repeat:
        from .oracle.repeat import repeat  # the oracle: keeps start-up fast

        for cand, v in zip(candidates, verdicts):
            if v.correct and v.speedup_ci:
                r = repeat(reference, config, root, cand, v, ns.repeat, progress=progress)
                v.diagnostics["repeats"] = {"n": ns.repeat, "inside": r.inside, "speedups": [x.speedup for x in r.again],
                                            "drift": r.drift.spread if r.drift else None}
                repeats.extend(r.lines())
    if settings.json:
        json.dump([v.to_json() for v in verdicts], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_verdicts(verdicts, oracle.workloads, oracle.device)
        for line in repeats:
            print(terminal_safe(line))
        if not ns.repeat:
            for v in verdicts:
                again = remeasure_text(v.diagnostics)  # the report's wording of the same promise
                if again:
                    # two lines: the table fits 80 columns, and so should what follows it
                    print(terminal_safe(f"{os.path.basename(v.candidate)}: {again[1]}:"))
                    print(terminal_safe(f"  {again[0]}"))
    return 0 if all(v.correct for v in verdicts) else 1


def _remeasure_command(argv: Sequence[str], candidates: Sequence[str], candidate: str) -> str:
    """This ``maxcode check`` command for one candidate, repeated in fresh processes."""
    kept = [a for a in argv if a == candidate or a not in candidates]
    return shlex.join(["maxcode", *kept, "--repeat", str(REMEASURE_REPEATS)])


def _console():
    try:
        from rich.console import Console  # when a command logs: keeps start-up fast
    except ImportError:
        return None
    return Console(stderr=True)


def _log(console: Any) -> Callable[[str], None] | None:
    """The progress callback that logs to ``console`` (None without one): a line can name a
    candidate's file or quote its output, so it is logged as plain text with its controls escaped."""
    if console is None:
        return None
    return lambda msg: console.log(terminal_safe(msg), markup=False)


def _print_verdicts(verdicts, workloads, device: str) -> None:
    # rich loads when a table is printed: keeps start-up fast
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    table = Table(title=f"maxcode check ({device})", show_lines=False)
    table.add_column("candidate", overflow="fold")
    table.add_column("status", no_wrap=True)
    for col in ("speedup", "95% CI", "ref", "cand", "build"):
        table.add_column(col, justify="right", no_wrap=True)
    for v in verdicts:
        ci = f"[{v.speedup_ci[0]:.3g}, {v.speedup_ci[1]:.3g}]" if v.speedup_ci else "-"
        sp = f"{v.speedup:.3g}x" if v.speedup is not None else "-"
        status = v.status + (" (weak check)" if v.weak_check else "") + (" (range-limited)" if v.range_limited else "")
        table.add_row(
            Text(terminal_safe(os.path.basename(v.candidate))),
            f"[{STATUS_STYLE[v.status]}]{status}[/]",
            sp,
            ci,
            fmt_time(v.reference_s),
            fmt_time(v.candidate_s),
            fmt_time(v.compile_s),
        )
    console.print(table)
    for v in verdicts:
        if v.reasons:
            console.print(Text.assemble((terminal_safe(os.path.basename(v.candidate)), "bold"), f": {v.status}"), highlight=False)
            for r in v.reasons:
                console.print(f"  {terminal_safe(r)}", highlight=False, markup=False)
            if v.range_limited:
                console.print(f"  range-limited ({v.range_limited}): not applied, no pull request, unless the "
                              "target sets accept_range_limited", highlight=False, markup=False)


def cmd_ablate(ns: argparse.Namespace) -> int:
    from rich.console import Console  # when the command runs: keeps start-up fast

    root = Path.cwd()
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    console = Console(stderr=True)
    summary = ablate(
        root, observations=split(ns.observations), reranks=split(ns.reranks), seeds=ns.seeds, budget=ns.budget,
        llm=ns.llm, record=Path(ns.record) if ns.record else None, out_dir=Path(ns.out) if ns.out else None,
        pytest_args=ns.pytest_args, timeout=ns.run_timeout, progress=lambda m: console.print(terminal_safe(m), highlight=False, markup=False),
    )
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        print(markdown_table(summary["rows"], summary["budget"]), end="")
        print(f"table, plot (curves.svg) and run reports: {summary['out_dir']}")
    return 0 if all("best_speedup" in r for r in summary["rows"]) else 1


def _regressions_table(ns: argparse.Namespace) -> Regressions:
    """``[tool.maxcode.regressions]`` (of ``--profile`` when given), parsed when the settings are
    loaded; the defaults without one; one line if bad."""
    pyproject = Path.cwd() / "pyproject.toml"
    if not pyproject.is_file() and ns.profile is None:
        return Regressions()
    try:
        return options.load_settings({"profile": ns.profile}, pyproject).regressions or Regressions()
    except ValueError as e:
        raise MaxcodeError(str(e)) from None


def _measured_how(ns: argparse.Namespace) -> tuple[Regressions, str, bool]:
    """The regressions table, the timer and whether runs fork from a server: the options, else the table."""
    reg = _regressions_table(ns)
    return reg, ns.timer or reg.timer, reg.fork_server if ns.fork_server is None else ns.fork_server


def _emit_comparison(ns: argparse.Namespace, result: CompareResult) -> int:
    """The markdown table on stdout (and in --markdown), the JSON in --json; the exit status."""
    from .bot import compare as cmp  # when a comparison is made: keeps start-up fast

    text = cmp.markdown(result)
    if ns.markdown:
        write_atomic(Path(ns.markdown), text)
    if ns.json:
        write_atomic(Path(ns.json), json.dumps(result.to_json(), indent=2) + "\n")
    print(text, end="")
    return 1 if ns.fail_on_regression and result.regressions else 0


def cmd_compare(ns: argparse.Namespace) -> int:
    from .bot import compare as cmp  # when the command runs: keeps start-up fast

    reg = _regressions_table(ns)
    result = cmp.compare(cmp.load_timings(Path(ns.base)), cmp.load_timings(Path(ns.head)),
                         threshold=ns.threshold or reg.threshold, thresholds=reg.thresholds, base_label=ns.base, head_label=ns.head)
    return _emit_comparison(ns, result)


def _branch_name(ns: argparse.Namespace, ref: str) -> str:
    if ns.branch:
        return str(ns.branch)
    for prefix in ("refs/remotes/origin/", "refs/heads/", "origin/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def cmd_bench_ab(ns: argparse.Namespace) -> int:
    # the A/B runner and the history load when the command runs: keeps start-up fast
    from .bench import ab
    from .bench.history import History, Record

    reg, timer, fork = _measured_how(ns)
    repo = _git_root(Path.cwd())
    console = _console()
    commits = {side: ab.resolve_commit(repo, ref) for side, ref in (("base", ns.base), ("head", ns.head))}
    branch = _branch_name(ns, ns.base)
    history = History.load(Path(ns.history)) if ns.history else None
    if ns.baseline == "stored" and history is None:
        raise MaxcodeError("bench-ab --baseline stored needs --history PATH (the file bench-record and bench-ab write)")
    kind = ab.processes(timer, fork)
    stored = (history.find(commits["base"], timer, ns.pytest_args, processes=kind)
              if history is not None and ns.baseline == "stored" else None)
    if ns.baseline == "stored" and stored is None:
        _say(console, f"bench-ab: {ns.history} holds no figures of the base {commits['base'][:12]} measured this way: "
                      "measuring the base as well")
    base, head = ab.interleaved(repo, ns.base, ns.head, ns.pytest_args, runs=ns.runs or reg.runs, fork_server=fork,
                                project=os.path.relpath(Path.cwd(), repo), timer=timer,
                                progress=_log(console),
                                stored_base=stored.samples if stored else None)
    result = ab.judge(base, head, threshold=ns.threshold or reg.threshold, thresholds=reg.thresholds,
                      base_label=ns.base, head_label=ns.head_label or ns.head, timer=timer)
    result.base_commit, result.head_commit = commits["base"], commits["head"]
    result.unit = "instructions" if timer == "instructions" else "s"
    again = ["maxcode", "bench-ab", commits["base"][:12], commits["head"][:12], "--runs", str(ns.runs or reg.runs), "--timer", timer]
    again += (["--threshold", str(ns.threshold)] if ns.threshold else []) + (["--profile", ns.profile] if ns.profile else [])
    again += [] if fork else ["--no-fork-server"]
    result.remeasure = _cd(Path.cwd(), repo) + shlex.join([*again, "--", *ns.pytest_args])  # read from the repository's root
    if stored is not None:
        result.baseline = f"stored by the run of {stored.when} (not re-measured)"
    if history is not None:
        if stored is None:
            history.add(Record(commits["base"], branch, timer, tuple(ns.pytest_args),
                               {name: list(t.data or [t.median_s]) for name, t in base.items()}, processes=kind))
            history.save()
        trends = ((c.name, history.trend(c.name, branch, timer, ns.pytest_args, processes=kind)) for c in result.comparisons)
        result.trends = {name: points for name, points in trends if len(points) > 1}
    return _emit_comparison(ns, result)


def cmd_bench_record(ns: argparse.Namespace) -> int:
    # the A/B runner and the history load when the command runs: keeps start-up fast
    from .bench import ab
    from .bench.history import History, Record

    reg, timer, fork = _measured_how(ns)
    repo = _git_root(Path.cwd())
    console = _console()
    commit = ab.resolve_commit(repo, ns.ref)
    history = History.load(Path(ns.history))
    samples = ab.measure(repo, {"ref": ns.ref}, ns.pytest_args, runs=ns.runs or reg.runs, fork_server=fork,
                         project=os.path.relpath(Path.cwd(), repo), timer=timer,
                         progress=_log(console))["ref"]
    branch = _branch_name(ns, ns.ref)
    history.add(Record(commit, branch, timer, tuple(ns.pytest_args), samples, processes=ab.processes(timer, fork)))
    history.save()
    print(f"stored {len(samples)} benchmark(s) of {commit[:12]} ({branch}, {timer}) in {ns.history}")
    return 0


def _say(console: Any, text: str) -> None:
    if console:
        console.log(terminal_safe(text), markup=False)
    else:
        print(terminal_safe(text), file=sys.stderr)


def _git_root(where: Path) -> Path:
    git = require("git", "maxcode bench-ab")

    try:
        return Path(git.Repo(where, search_parent_directories=True).working_tree_dir or where)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise MaxcodeError(f"bench-ab: {where} is not in a git repository") from None


def _repo_name(given: str | None) -> str:
    name = given or os.environ.get("GITHUB_REPOSITORY")
    if not name or not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        raise MaxcodeError(f"--repo {name!r}: give the repository as OWNER/NAME (or set GITHUB_REPOSITORY)" if name else
                           "--repo: give the repository as OWNER/NAME (or set GITHUB_REPOSITORY)")
    return name


def cmd_pr(ns: argparse.Namespace) -> int:
    path = Path(ns.report)
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise MaxcodeError(f"{path}: no such report; run pytest --maxcode first (or pass the --maxcode-json file)") from None
    except ValueError as e:
        raise MaxcodeError(f"{path}: not a JSON report ({e})") from None
    bot = Bot(Path.cwd(), parse_report(report, str(path)), repo_name=_repo_name(ns.repo), base=ns.base, remote=ns.remote,
              author=ns.author or os.environ.get("MAXCODE_GIT_AUTHOR") or DEFAULT_AUTHOR, draft=ns.draft,
              labels=tuple(ns.label), dry_run=ns.dry_run, api_url=ns.github_url, max_wait=ns.max_wait,
              reject_margin=ns.reject_margin, replace_margin=ns.replace_margin)
    outcomes = bot.run()
    for o in outcomes:
        print(terminal_safe(o.line()))
    if ns.urls_file:
        write_atomic(Path(ns.urls_file), "".join(f"{o.url}\n" for o in outcomes if o.url))
    if not outcomes:
        print("the report has no targets")
    return 1 if any(o.action == "failed" for o in outcomes) else 0


def cmd_comment(ns: argparse.Namespace) -> int:
    from .bot.comment import upsert_comment  # keeps start-up fast

    path = Path(ns.file)
    try:
        body = path.read_text()
    except OSError:
        raise MaxcodeError(f"{path}: cannot read the comment's markdown") from None
    gh, token = client(ns.github_url, max_wait=ns.max_wait)
    posted = upsert_comment(gh, _repo_name(ns.repo), ns.pr, body, marker=ns.marker, token=token)
    print(f"{'created' if posted.created else 'updated'} {posted.url}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if args[:1] in (["bench-ab"], ["bench-record"]) and "--" in args:  # pytest's own arguments, options included
        cut = args.index("--")
        args, passed = args[:cut], args[cut + 1:]
    ns = parser.parse_args(args)
    if passed:
        ns.pytest_args = [*ns.pytest_args, *passed]
    try:
        if ns.command == "check":
            return cmd_check(ns)
        if ns.command == "status":
            return cmd_status(ns)
        if ns.command == "apply":
            return cmd_apply(ns)
        if ns.command == "show":
            return cmd_show(ns)
        if ns.command == "value":
            return cmd_value(ns)
        if ns.command == "ablate":
            return cmd_ablate(ns)
        if ns.command == "compare":
            return cmd_compare(ns)
        if ns.command == "bench-ab":
            return cmd_bench_ab(ns)
        if ns.command == "bench-record":
            return cmd_bench_record(ns)
        if ns.command == "bench":
            return {"kernelbench": kernelbench.run, "pie": pie.run}[ns.suite](ns)
        if ns.command == "pr":
            return cmd_pr(ns)
        if ns.command == "remeasure":
            return cmd_remeasure(ns)
        if ns.command == "comment":
            return cmd_comment(ns)
    except MaxcodeError as e:
        sys.stderr.write(f"maxcode: error: {terminal_safe(str(e))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("maxcode: interrupted; finished evaluations are in .maxcode/maxcode.db\n")
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
