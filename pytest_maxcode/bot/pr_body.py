"""The optimization pull request's title, body and commit message: numbers a reviewer can trust,
in the order a reviewer asks for them (how much faster, measured how, is it still correct, on
what, at what cost, what is the code, how do I check it myself).

Safe to render: every text that came from a model, a compiler or a test run is escaped
(:func:`text`) or fenced (:func:`fence`, :func:`code`), with fences longer than any backtick run
in what they hold, so a kernel's comment cannot close its code block and write the rest of the
page. The title, the body and the commit message quote the numbers of one :class:`Numbers`.

The bot hands these functions its typed :class:`TargetResult` and :class:`Report`, and they read
their attributes. A target or report given as JSON (a hand-written or partial one, a test's) is
read into those types once, where it enters (:func:`as_target`, :func:`parse_report`).
"""

from __future__ import annotations

import difflib
import hashlib
import html
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..apply import is_program
from ..errors import MaxcodeError
from ..model.report import (
    BenchmarkResult,
    ReferenceInfo,
    Report,
    TargetResult,
    TargetStatus,
    Timing,
    parse_report,
    parse_target,
)
from ..report import fmt_time, md_escape, noise_text, remeasure_text, sandbox_weak
from .github import BODY_CHARS, fit

LANG_NAMES = {"cuda": "CUDA", "cpp": "C++", "py": "Python"}
FENCES = {"cuda": "cuda", "cpp": "cpp", "py": "python"}
MAX_SOURCE_CHARS = 60_000  # GitHub caps a PR body at 65536 characters (github.BODY_CHARS)
MAX_REPLACED_CHARS = 20_000  # a replacement shows two sources and a diff within the same cap
#: test names listed where listing them all would take the body past GitHub's cap
TESTS_SHOWN = 20

#: a target as the bot holds it, or as the report's JSON holds it (read with :func:`as_target`)
Target = TargetResult | Mapping[str, Any]


def as_target(t: Target) -> TargetResult:
    """``t`` as a :class:`TargetResult`. A hand-written target may leave out its status and id,
    which the body does not quote: only verified targets get a pull request, and a marker test
    asks for numbers alone. A malformed one is a one-line MaxcodeError (:func:`parse_target`)."""
    if isinstance(t, TargetResult):
        return t
    return parse_target({"id": "", "status": TargetStatus.VERIFIED.value, **t}, "the pull request's target")


@dataclass(frozen=True)
class Accepted:
    """The kernel the base branch's ``maxcode.lock`` accepts for the target: what a PR replaces."""

    kernel: str  # path relative to the project
    kernel_hash: str
    speedup: float
    speedup_ci: tuple[float, float] | None
    date: str
    tool_version: str
    source: str
    lang: str = "cpp"
    #: its speedup and interval measured again in the run that found the new kernel (the search
    #: starts from it), beside the new one: the head-to-head figures; None where it was not
    run_speedup: float | None = None
    run_ci: tuple[float, float] | None = None

    @property
    def candidate_hash(self) -> str:
        """Its hash as the search's candidates are hashed (``CandidateSpec.hash``)."""
        fmt = "compat" if self.lang == "py" else "native"
        return hashlib.sha256(f"{fmt}\0{self.lang}\0{self.source}".encode()).hexdigest()

    def measured_in(self, t: TargetResult) -> Accepted:
        """This kernel with the figures the report's search measured for it, where it did: its
        own node (origin ``accepted:``, the same source), correct and timed in that run (a figure
        resumed from the store was measured on another day, perhaps on another machine)."""
        for row in t.trajectory:
            if (row.origin == f"accepted:{self.kernel}" and row.hash == self.candidate_hash and not row.resumed
                    and row.status in ("faster", "not_faster") and row.speedup):
                return replace(self, run_speedup=float(row.speedup), run_ci=interval(row.speedup_ci))
        return self


@dataclass(frozen=True)
class Numbers:
    """The numbers a PR quotes, computed once so the title, body and commit message agree."""

    speedup: float
    ci: tuple[float, float] | None
    accepted: float | None = None  # the replaced kernel's speedup, for a replacement (this run's where measured)
    accepted_ci: tuple[float, float] | None = None
    accepted_here: bool = False  # measured in this run, beside the new kernel

    @property
    def x(self) -> str:
        return f"{self.speedup:.3g}x"

    @property
    def interval(self) -> str:
        return f"[{self.ci[0]:.3g}, {self.ci[1]:.3g}]" if self.ci else ""

    @property
    def low(self) -> float:
        return self.ci[0] if self.ci else self.speedup

    @property
    def over_accepted(self) -> str:
        return f"{self.speedup / self.accepted:.3g}x" if self.accepted else ""


def interval(ci: Sequence[float] | None) -> tuple[float, float] | None:
    """A stored ``[low, high]`` as a pair of floats; None where there is none."""
    return (float(ci[0]), float(ci[1])) if ci and len(ci) == 2 else None


def numbers(t: Target, accepted: Accepted | None = None) -> Numbers:
    t = as_target(t)
    if t.speedup is None:
        raise MaxcodeError(f"{t.id}: the report quotes no speedup for it; run pytest --maxcode again")
    own = float(t.speedup), interval(t.speedup_ci)
    if accepted is None:
        return Numbers(*own)
    here = accepted.run_speedup is not None
    return Numbers(*own, accepted.run_speedup if here else accepted.speedup, accepted.run_ci if here else accepted.speedup_ci, here)


# -- safe text ----------------------------------------------------------------------------

#: what GitHub links in plain text and CommonMark does not (GFM's extended autolinks): the ``:`` of
#: ``http://`` (any scheme), the ``.`` of ``www.``; a backslash before either shows the same text
_AUTOLINK = re.compile(r"(?<=www)\.|:(?=//)", re.IGNORECASE)


def text(value: object) -> str:
    """Untrusted text as one literal markdown line: no emphasis, HTML, links, headings or @mentions.
    A bare ``https://...`` or ``www....`` is broken with a backslash (it reads the same); an ``@``
    is followed by a zero-width space, which stops both a mention and an e-mail autolink."""
    return _AUTOLINK.sub(lambda m: "\\" + m.group(0), md_escape(value)).replace("@", "@&#8203;")


def _longest_run(s: str, char: str = "`") -> int:
    return max((len(m) for m in re.findall(re.escape(char) + "+", s)), default=0)


def code(value: object, *, cell: bool = False) -> str:
    """Untrusted text as an inline code span: one line, delimited by more backticks than it holds
    (``cell``: inside a table row, where a bare ``|`` would end the cell)."""
    s = " ".join(str(value).split())
    if cell:
        s = s.replace("|", "\\|")
    ticks = "`" * (_longest_run(s) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def fence(content: str, info: str = "") -> list[str]:
    """A fenced code block that ``content`` cannot close: the fence is a backtick run longer than
    any in the content (a ``~~~`` line cannot close a backtick fence), the info string is a word."""
    ticks = "`" * max(3, _longest_run(content) + 1)
    word = re.sub(r"[^A-Za-z0-9_+-]", "", info)
    return [ticks + word, content.rstrip("\n"), ticks]


# -- the marker ---------------------------------------------------------------------------

def marker(target_id: str, kernel_hash: str, *, reference: str = "", nums: Numbers | None = None) -> str:
    """The hidden line the bot finds its PRs by: the target, the kernel, the reference it was
    searched against and the speedup quoted (what a closed PR's memory needs)."""
    extra = f" reference={reference}" if reference else ""
    if nums is not None:
        extra += f" speedup={nums.speedup:.6g} low={nums.low:.6g}"
    return f"<!-- maxcode:pr target={target_id} kernel={kernel_hash}{extra} -->"


_MARKER = re.compile(r"<!-- maxcode:pr target=(?P<target>\S+) kernel=(?P<kernel>[0-9a-f]+)(?P<rest>[^>]*?)\s*-->")


def parse_marker(body: str | None) -> tuple[str, str] | None:
    m = _MARKER.search(body or "")
    return (m.group("target"), m.group("kernel")) if m else None


def parse_marker_fields(body: str | None) -> dict[str, str]:
    """Every ``key=value`` of the bot's marker ({} when the body has none); older markers hold
    only the target and the kernel."""
    m = _MARKER.search(body or "")
    if not m:
        return {}
    fields = dict(re.findall(r"(\w+)=(\S+)", m.group("rest")))
    return {"target": m.group("target"), "kernel": m.group("kernel"), **fields}


# -- title, commit message ----------------------------------------------------------------

def _device(t: TargetResult, machine: Mapping[str, object]) -> str:
    if t.device == "cuda":
        gpu = str(machine.get("gpu") or "GPU")
        return re.sub(r"^NVIDIA\s+", "", gpu).split(" ")[0] if gpu != "GPU" else gpu
    return "CPU"


def _kernel_lang(t: TargetResult) -> str:
    """The best kernel's language ("cpp", "cuda", "py"; '' where the report does not say)."""
    return t.best.lang if t.best is not None and t.best.lang else ""


def _lang(t: TargetResult) -> str:
    return "C++ program" if is_program(t) else LANG_NAMES.get(_kernel_lang(t), "native")


def title(t: Target, machine: Mapping[str, object], nums: Numbers | None = None) -> str:
    t = as_target(t)
    nums = nums or numbers(t)
    where = f"({_lang(t)}, {' '.join(_device(t, machine).split())[:40]})"
    if nums.accepted:
        return f"⚡ Replace the accepted kernel of {t.id}: {nums.accepted:.3g}x -> {nums.x} {where}"
    return f"⚡ Speed up {t.id} {nums.x} {where}"


def commit_message(t: Target, machine: Mapping[str, object], nums: Numbers, kernel_hash: str,
                   accepted: Accepted | None = None) -> str:
    """The bot's commit message: the title's numbers and nothing a later run could contradict."""
    t = as_target(t)
    interval = f" (95% CI {nums.interval})" if nums.ci else ""
    lines = [title(t, machine, nums), "",
             f"Kernel {kernel_hash} for {t.id}, verified by pytest-maxcode: {nums.x}{interval} over the original."]
    if accepted:
        lines.append(f"Replaces the accepted kernel {accepted.kernel_hash[:16]} ({nums.accepted:.3g}x"
                     f"{' in the same run' if nums.accepted_here else ''}): {nums.over_accepted} faster than it.")
    return "\n".join(lines) + "\n"


# -- the body -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Where:
    """Where the kernel goes and how a reviewer reaches it: the branch, the kernel's path in the
    project, and the project's folder relative to the repository root ('.' at the root)."""

    branch: str
    kernel_path: str
    kernel_hash: str
    project_dir: str = "."
    remote: str = "origin"
    #: the branch the pull request goes into
    base: str = "main"


def _said(ref: ReferenceInfo | None, name: str) -> str:
    """A field of the target's reference as the report says it, "?" where it does not."""
    return str(getattr(ref, name)) if ref is not None and ref.given(name) else "?"


def _what(t: TargetResult, lang: str, kernel_path: str) -> str:
    """The opening paragraph: what was found, how it was checked, and what the change does."""
    if is_program(t):
        return (f"pytest-maxcode rewrote the C++ program {code(kernel_path)}, ran the rewrite on the program's test cases "
                f"({code(_said(t.reference, 'testcases'))}: each input on stdin, the output compared with the expected one; lines equal, "
                "or numbers within 1e-3), and timed both programs interleaved, test case by test case. This pull request "
                "replaces the program's source with the rewrite.")
    return (f"pytest-maxcode found a {LANG_NAMES.get(lang) or text(lang) or 'native'} kernel for {code(t.id)} "
            f"({code(_said(t.reference, 'file'))}), "
            "checked it against the original on the inputs your tests pass it, re-ran your tests with it active, "
            f"and timed both interleaved in one process. The kernel is {code(kernel_path)}; `maxcode.lock` routes calls to it "
            "for the input signatures it was checked on, and everything else still runs the original.")


def ci_text(ci: Sequence[float] | None) -> str:
    return f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else ""


def body(t: Target, report: Report | Mapping[str, Any], *, source: str, where: Where | None = None,
         accepted: Accepted | None = None, nums: Numbers | None = None, reference_hash: str = "",
         kernel_path: str = "", kernel_hash: str = "", branch: str = "") -> str:
    """The pull request's text: the speedup by workload, the warnings, the user's benchmarks and
    tests re-run, the machine, the search, the source and how to check it, in that order.
    ``reference_hash``: the searched reference's hash, for the marker (the memory of a closed PR).

    Ten parameters because ``kernel_path``, ``kernel_hash`` and ``branch``, the older spelling of a
    ``where`` at the repository's root, are kept for the callers (tests among them) written before
    :class:`Where`; all but the target and the report are keyword-only."""
    where = where or Where(branch, kernel_path, kernel_hash)
    t, report = as_target(t), parse_report(report)
    nums = nums or numbers(t, accepted)
    lang = _kernel_lang(t)
    heading = (f"## ⚡ A faster kernel for {code(t.id)}: {nums.x}, replacing the accepted {nums.accepted:.3g}x"
               if accepted else f"## ⚡ {code(t.id)} is {nums.x} faster")
    searched = t.reference.hash if t.reference is not None else ""
    out = [
        marker(t.id, where.kernel_hash, reference=reference_hash or str(searched or ""), nums=nums),
        heading,
        "",
        _what(t, lang, where.kernel_path),
        *_replaces(accepted, nums, where),
        "",
        "| workload | original | optimized | speedup (95% CI) |",
        "|---|---:|---:|---:|",
        f"| **all (geometric mean)** | {fmt_time(t.baseline_s)} | {fmt_time(t.best_s)} | **{nums.x}**{ci_text(nums.ci)} |",
    ]
    for w in t.workloads:
        out.append(f"| {code(w.signature, cell=True)} ({w.n_sets} input sets) | {fmt_time(w.reference_s)} | "
                   f"{fmt_time(w.candidate_s)} | {w.speedup:.3g}x{ci_text(w.speedup_ci)} |")
    out += ["", f"Verdict: {text(t.reason)}"]
    out += _reproduce(t)
    out += _warnings(t)
    out += _benchmarks(t.benchmarks, where, _threads_note(t, report))
    middle = [*_environment(t, report), *_search(t)]
    tail = check_it(t, where)

    def assemble(shown: int | None, room: int | None) -> str:
        return "\n".join([*out, *_tests(t, shown), *middle, *_source(t, source, where.kernel_path, lang, accepted, room),
                          *tail]) + "\n"

    # GitHub refuses a longer body: fewer test names first, then less source, then a cut
    whole = assemble(None, None)
    if len(whole) <= BODY_CHARS:
        return whole
    shorter = assemble(TESTS_SHOWN, None)
    if len(shorter) > BODY_CHARS:
        shorter = assemble(TESTS_SHOWN, max(0, BODY_CHARS - len(assemble(TESTS_SHOWN, 0)) - 256))
    return fit(shorter, "<sub>(cut here: GitHub caps a pull request's text at 65,536 characters; the report has the rest)</sub>")


def _reproduce(t: TargetResult) -> list[str]:
    """The command that re-measures the quoted speedup and the interval it should land in, and
    how noisy the machine was while it was measured."""
    out = []
    cmd = remeasure_text(t)
    if cmd is not None:
        out.append(f"Re-measure it where the search ran (its `.maxcode/` holds the inputs the tests gave): "
                   f"{code(cmd[0])}; {text(cmd[1])}.")
    noise = noise_text(t)
    if noise:
        out.append(f"Measured: {text(noise)}.")
    return [line for item in out for line in ("", item)]


def _replaces(accepted: Accepted | None, nums: Numbers, where: Where) -> list[str]:
    """Old and new side by side: what the base branch accepts now and what this PR puts instead."""
    if not accepted:
        return []
    how = ("both measured against the original in this run, one beside the other" if nums.accepted_here else
           "both measured against the original; the accepted one as its lock entry quotes it, not in this run")
    measured = (f"this run (its lock entry quotes {accepted.speedup:.3g}x, {text(accepted.date)})" if nums.accepted_here
                else f"{text(accepted.date)}, pytest-maxcode {text(accepted.tool_version)}")
    return ["", (f"This pull request **replaces** the kernel that `maxcode.lock` accepts on the base branch; "
            f"the new one is {nums.over_accepted} faster than it ({how})."), "",
            "| | accepted now (replaced) | this pull request |", "|---|---:|---:|",
            (f"| kernel | {code(accepted.kernel, cell=True)} ({accepted.kernel_hash[:16]}) | "
            f"{code(where.kernel_path, cell=True)} ({where.kernel_hash}) |"),
            f"| speedup over the original (95% CI) | {nums.accepted:.3g}x{ci_text(nums.accepted_ci)} | **{nums.x}**{ci_text(nums.ci)} |",
            f"| measured | {measured} | this run |"]


def _warnings(t: TargetResult) -> list[str]:
    out: list[str] = []
    if sandbox_weak(t.sandbox):
        out += ["", (f"> [!WARNING]\n> The candidates were checked without a full OS sandbox: {text(t.sandbox)}. "
                "Candidate code could reach the timer, the network and this user's files; re-check with bubblewrap installed.")]
    if t.range_limited:
        out += ["", (f"> [!CAUTION]\n> Range-limited: {text(t.range_limited)}. The kernel is right on the inputs "
                "your tests pass, not on the wider or special values (NaN, inf, large magnitudes) listed as failed; "
                "this target sets `accept_range_limited`, so it is proposed anyway.")]
    return out


def _threads_note(t: TargetResult, report: Report) -> str:
    """Why the user's benchmarks can show another speedup than the oracle's, where they can."""
    threads = t.measurement.threads if t.measurement is not None else None
    cores = str(report.machine.get("cores", ""))
    if not threads or not cores.isdigit() or threads >= int(cores):
        return ""
    return (f"These ran in your own test process with all {cores} cores; the speedup above was timed on {threads} "
            f"thread(s) a side, as the timer keeps a core of its own. A kernel that scales with threads better "
            f"than the original gains more here, one that scales worse less.")


def _benchmarks(benchmarks: Sequence[BenchmarkResult], where: Where, threads_note: str = "") -> list[str]:
    if not benchmarks:
        return []
    runs = max((int(b.runs or 1) for b in benchmarks), default=1)
    how = f"{runs} runs each, alternating" if runs > 1 else "one run each"
    out = ["", f"### Your benchmarks (pytest-benchmark, re-run with and without the kernel: {how})", "",
           *([text(threads_note), ""] if threads_note else []),
           "| benchmark | original (median ± sd) | optimized (median ± sd) | speedup (95% CI) | rounds |", "|---|---:|---:|---:|---:|"]
    for b in benchmarks:
        r, c = b.reference or Timing(), b.candidate or Timing()
        out.append(f"| {code(b.name, cell=True)} | {fmt_time(r.median_s)} ± {fmt_time(r.stddev_s)} | "
                   f"{fmt_time(c.median_s)} ± {fmt_time(c.stddev_s)} | {b.speedup:.3g}x{ci_text(b.speedup_ci)} | "
                   f"{text(r.rounds if r.given('rounds') else '?')} / {text(c.rounds if c.given('rounds') else '?')} |")
    # the base where this branch left it (the branch may since have merged its base or gained commits)
    base = f'"$(git merge-base {shlex.quote(f"{where.remote}/{where.base}")} HEAD)"'
    again = " ".join(["maxcode bench-ab", base, "HEAD", "--runs", str(runs), "--timer time --",
                      *(shlex.quote(b.name) for b in benchmarks)])
    out += ["", "Re-measure them on this branch, from the repository's root (runs of the original and of the kernel, "
                "alternating; it says which benchmarks changed):", "", *fence("\n".join([*cd_project(where), again]), "sh")]
    return out


def _tests(t: TargetResult, shown: int | None = None) -> list[str]:
    """The tests re-run with the kernel; ``shown``: list at most that many by name."""
    tests = t.tests
    rerun = tests.rerun or []
    heading = "### Tests re-run with the kernel active"
    if is_program(t):
        heading = "### Test cases and tests re-run on the rewrite" if tests.pytest else "### Test cases re-run on a fresh build of the rewrite"
    calls = tests.kernel_calls
    out = ["", heading, "",
           f"{'✅' if tests.passed else '❌'} {text(tests.summary)}"
           + (f"; the kernel was called {int(calls)} time(s)" if isinstance(calls, int) and calls else "")]
    if rerun:
        names = [f"- {code(n)}" for n in rerun[:shown]]
        if shown is not None and len(rerun) > shown:
            names.append(f"- ... and {len(rerun) - shown} more (the report lists them all)")
        out += ["", f"<details><summary>{len(rerun)} test(s)</summary>", "", *names, "", "</details>"]
    return out


def _or_unknown(value: str | None) -> str:
    """A field the report may leave out (None), as the body shows it: "?"."""
    return "?" if value is None else value


def _environment(t: TargetResult, report: Report) -> list[str]:
    machine = report.machine
    return ["", "### Environment", "",
            f"- device: {text(_or_unknown(t.device))}" + (f" ({text(machine['gpu'])})" if machine.get("gpu") else "")
            + f", arch {text(_or_unknown(t.arch))}",
            f"- CPU: {text(machine.get('cpu', '?'))}, {text(machine.get('cores', '?'))} cores",
            f"- torch {text(machine.get('torch', '?'))}, pytest-maxcode {text(report.tool_version or '?')}"]


def _search(t: TargetResult) -> list[str]:
    search = t.search
    if search is None or not search.to_json():  # an empty one is none
        return []
    cands = t.candidates
    model = text(search.llm) if search.llm else "no model (built-in candidates)"
    return ["", "### Search", "",
            f"- strategy {code(search.strategy)}, policy {code(search.policy)}, model {model}",
            (f"- {int(cands.tried)} candidate(s) tried, {int(cands.correct)} correct, "
            f"{int(cands.faster)} faster; stopped because {text(search.stop_reason if search.given('stop_reason') else '?')}"),
            (f"- {int(search.llm_calls or 0)} LLM call(s), "
            f"{int(search.tokens or 0)} tokens, ${float(search.cost_usd or 0):.4f}")]


def _cap(source: str, limit: int) -> str:
    return source if len(source) <= limit else source[:limit] + "\n... (truncated; the file is in this PR)"


def _details(summary: str, inner: list[str]) -> list[str]:
    return ["", f"<details><summary>{summary}</summary>", "", *inner, "", "</details>"]


def _source(t: TargetResult, source: str, kernel_path: str, lang: str, accepted: Accepted | None,
            room: int | None = None) -> list[str]:
    """The source (and, replacing an accepted kernel, that kernel and the diff); ``room``: the
    characters they may take together, where the body would be too long for GitHub otherwise."""
    what = "The rewritten program" if is_program(t) else "Kernel source"
    lines = source.count("\n") + 1
    path = html.escape(kernel_path)
    if not accepted:
        cap = MAX_SOURCE_CHARS if room is None else min(MAX_SOURCE_CHARS, room)
        return _details(f"{what}: <code>{path}</code> ({lines} lines)", fence(_cap(source, cap), FENCES.get(lang, "")))
    cap = MAX_REPLACED_CHARS if room is None else min(MAX_REPLACED_CHARS, room // 3)
    diff = "\n".join(difflib.unified_diff(accepted.source.splitlines(), source.splitlines(),
                                          f"accepted/{accepted.kernel}", f"new/{kernel_path}", lineterm=""))
    return [*_details(f"Kernel source: <code>{path}</code> ({lines} lines)", fence(_cap(source, cap), FENCES.get(lang, ""))),
            *_details(f"The accepted kernel it replaces: <code>{html.escape(accepted.kernel)}</code>",
                      fence(_cap(accepted.source, cap), FENCES.get(lang, ""))),
            *_details("What changed (diff, accepted -> new)", fence(_cap(diff, cap), "diff"))]


def cd_project(where: Where) -> list[str]:
    """The ``cd`` from the repository root into the project's folder that a block of commands
    starts with (``maxcode`` and pytest take the project from the current directory); none at the root."""
    return [] if where.project_dir in ("", ".") else [f"cd {shlex.quote(where.project_dir)}"]


def check_commands(t: Target, where: Where) -> list[str]:
    """The commands of "Check it yourself", runnable as written from the repository root in
    bash or zsh: the branch, then ``cd`` into the project, then the tests (ids shell-quoted)."""
    t = as_target(t)
    q = shlex.quote
    rerun = [str(n) for n in t.tests.rerun or []][:3]
    # FETCH_HEAD, not the branch's name: a single-branch or shallow clone has no remote-tracking
    # branch to check out, and a local branch left from before a force-push would be stale
    out = [f"git fetch {q(where.remote)} {q(where.branch)} && git checkout -B {q(where.branch)} FETCH_HEAD",
           *cd_project(where)]
    if not is_program(t):
        out += ["maxcode status", " ".join(["pytest", *map(q, rerun)])]
    out.append(f"pytest --maxcode --maxcode-target={q(str(t.id))}")
    return out


def check_it(t: Target, where: Where) -> list[str]:
    t = as_target(t)
    steps = ["check out this branch"] + (["go to the project's folder"] if cd_project(where) else [])
    if not is_program(t):
        steps += ["see that the kernel is active on this machine", "run your tests with it"]
    steps.append("search and verify again here")
    return ["", "### Check it yourself", "", f"From the repository's root: {'; '.join(steps)}.", "",
            *fence("\n".join(check_commands(t, where)), "sh"), "",
            ("<sub>Opened by pytest-maxcode. Closing this PR without merging keeps pytest-maxcode from proposing another kernel "
            "for this target until its reference changes or a clearly faster kernel is found; add the label "
            "<code>maxcode:never</code> before closing to stop it for good.</sub>")]
