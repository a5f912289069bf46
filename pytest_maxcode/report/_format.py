"""Plain-text cell formatting shared by the terminal, markdown and HTML views.

One place decides how a time, a speedup or a verdict reads, so the three views never disagree.
Every function tolerates missing or null fields: a report from an interrupted run still renders.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..model.jsontypes import JSON
from ..model.report import (
    Evaluation,
    Measurement,
    Remeasure,
    SearchSummary,
    TargetResult,
    WorkloadResult,
    row_of,
    rows_of,
)
from ..model.verdict import undecided
from ..options import MIN_SPEEDUP

SUMMARY_COLUMNS: tuple[str, ...] = (
    "target",
    "workloads",
    "baseline",
    "best",
    "speedup",
    "verdict",
    "candidates (tried / correct / failed)",
    "tests re-run",
)

CORRECT_STATUSES = ("faster", "not_faster")
FAILURE_ORDER = ("wrong", "compile_error", "runtime_error", "crash", "timeout", "rejected", "format")


def finite(x: object) -> float | None:
    """A number we can print or plot, or None (JSON null, NaN, infinity and non-numbers alike)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def fmt_time(seconds: object) -> str:
    """Seconds as 3 significant figures in the largest unit that keeps the value >= 1."""
    s = finite(seconds)
    if s is None:
        return "-"
    if s == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_ratio(x: object) -> str:
    """A speedup factor with two decimals, e.g. ``2.31x``."""
    v = finite(x)
    return "-" if v is None else f"{v:.2f}x"


def fmt_speedup(speedup: object, ci: object) -> str:
    """``2.31x [2.10, 2.52]``: the estimate with its interval, so a reader sees how sure it is."""
    head = fmt_ratio(speedup)
    if head == "-":
        return head
    if isinstance(ci, Sequence) and not isinstance(ci, str) and len(ci) == 2:
        lo, hi = finite(ci[0]), finite(ci[1])
        if lo is not None and hi is not None:
            return f"{head} [{lo:.2f}, {hi:.2f}]"
    return head


def fmt_verdict(target: Mapping[str, JSON]) -> str:
    """Status plus a flag when the correctness check was weaker than usual."""
    status = str(target.get("status", "?"))
    return status + (" (weak check)" if target.get("weak_check") else "") + (" (range-limited)" if target.get("range_limited") else "")


def fmt_failed(failed: object) -> str:
    """Failures by kind, known kinds first in a fixed order, e.g. ``wrong 3, compile_error 2``."""
    if not isinstance(failed, Mapping):
        return "-"
    keys = [k for k in FAILURE_ORDER if k in failed] + sorted(k for k in failed if k not in FAILURE_ORDER)
    parts = [f"{k} {failed[k]}" for k in keys if failed[k]]
    return ", ".join(parts) if parts else "-"


def fmt_candidates(candidates: object) -> str:
    """``tried / correct / failed-by-kind``: how much of the budget went where."""
    if not isinstance(candidates, Mapping):
        return "-"
    return f"{candidates.get('tried', 0)} / {candidates.get('correct', 0)} / {fmt_failed(candidates.get('failed'))}"


def fmt_counts(candidates: object) -> str:
    """``tried / correct / failed`` as three numbers: the narrow terminal's candidates cell."""
    if not isinstance(candidates, Mapping):
        return "-"
    failed = candidates.get("failed")
    n_failed = sum(int(finite(v) or 0) for v in failed.values()) if isinstance(failed, Mapping) else 0
    return f"{candidates.get('tried', 0)} / {candidates.get('correct', 0)} / {n_failed}"


def fmt_tests(tests: object) -> str:
    """What re-running the user's own tests against the best candidate gave, or ``-`` if nothing ran."""
    if not isinstance(tests, Mapping):
        return "-"
    rerun = tests.get("rerun") or []
    passed = tests.get("passed")
    if passed is None or not rerun:
        return "-"
    summary = str(tests.get("summary") or "").strip()
    if summary:
        return summary
    return f"{len(rerun)} passed" if passed else f"{len(rerun)} failed"


def fmt_params(params: object) -> str:
    """Tuning parameters of the best candidate, ``k=v`` comma-separated."""
    if not isinstance(params, Mapping) or not params:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in params.items())


def fmt_cost(x: object) -> str:
    """Dollars: four decimals below a dollar (LLM calls are cheap one by one), two above."""
    v = finite(x)
    if v is None:
        return "-"
    return f"${v:.4f}" if abs(v) < 1 else f"${v:,.2f}"


def fmt_count(x: object) -> str:
    """An integer count with thousands separators, ``-`` when missing."""
    v = finite(x)
    return "-" if v is None else f"{int(v):,}"


def search_brief(search: object) -> str:
    """``greedy, 40 evaluations, 12 LLM calls, $0.0623``: a search in one short phrase ('' without one)."""
    s = row_of(SearchSummary, search)
    if s is None:
        return ""
    parts = [str(s.strategy or "?"), f"{fmt_count(s.evaluations)} evaluations"]
    if s.llm_calls:
        parts.append(f"{fmt_count(s.llm_calls)} LLM calls")
    parts.append(fmt_cost(s.cost_usd))
    return ", ".join(parts)


def search_line(search: object) -> str:
    """Strategy, policy, model, evaluations, LLM calls, tokens, cost and why it stopped ('' without a search)."""
    s = row_of(SearchSummary, search)
    if s is None:
        return ""
    how = [f"policy {s.policy or '?'}"]
    if s.llm:
        how.append(f"model {s.llm}")
    if s.observation:
        how.append(f"observation {s.observation}")
    line = (
        f"search: strategy {s.strategy or '?'} ({', '.join(how)}), "
        f"{fmt_count(s.evaluations)} evaluations, {fmt_count(s.llm_calls)} LLM calls, "
        f"{fmt_count(s.tokens)} tokens, {fmt_cost(s.cost_usd)}"
    )
    if s.stop_reason:
        line += f"; stopped: {s.stop_reason}"
    return line


def target_facts(t: Mapping[str, JSON]) -> list[str]:
    """The per-target facts every renderer lists, as plain text (each renderer escapes)."""
    facts = [
        f"speedup {fmt_speedup(t.get('speedup'), t.get('speedup_ci'))}, baseline {fmt_time(t.get('baseline_s'))}, "
        f"best {fmt_time(t.get('best_s'))}, elapsed {fmt_time(t.get('elapsed_s'))}"
    ]
    best = t.get("best")
    if isinstance(best, Mapping):
        facts.append(
            f"best candidate: {best.get('source_path', '?')} ({best.get('lang', '?')}, origin {best.get('origin', '?')}, "
            f"hash {str(best.get('hash', ''))[:12]}), params: {fmt_params(best.get('params'))}"
        )
    cands = t.get("candidates")
    if isinstance(cands, Mapping):
        facts.append(
            f"candidates: {cands.get('tried', 0)} tried, {cands.get('correct', 0)} correct, "
            f"{cands.get('faster', 0)} faster; failed: {fmt_failed(cands.get('failed'))}"
        )
    search = search_line(t.get("search"))
    if search:
        facts.append(search)
    return facts


def summary_row(target: Mapping[str, Any]) -> list[str]:
    """One row of the summary table, in :data:`SUMMARY_COLUMNS` order."""
    workloads = target.get("workloads") or []
    return [
        str(target.get("id", "?")),
        str(len(workloads)),
        fmt_time(target.get("baseline_s")),
        fmt_time(target.get("best_s")),
        fmt_speedup(target.get("speedup"), target.get("speedup_ci")),
        fmt_verdict(target),
        fmt_candidates(target.get("candidates")),
        fmt_tests(target.get("tests")),
    ]


def machine_line(report: Mapping[str, Any]) -> str:
    """Where the numbers were measured: timings mean nothing without the machine."""
    m = report.get("machine") or {}
    parts = [str(m.get("host", "?")), str(m.get("cpu", "?"))]
    if m.get("cores"):
        parts.append(f"{m['cores']} cores")
    if m.get("torch"):
        parts.append(f"torch {m['torch']}")
    dev = str(m.get("device", "?"))
    if m.get("gpu"):
        dev += f" ({m['gpu']})"
    parts.append(f"device {dev}")
    return ", ".join(parts)


def options_line(report: Mapping[str, Any]) -> str:
    """The knobs of the run, so a reader can reproduce it."""
    o = report.get("options") or {}
    t = finite(o.get("time"))
    return ", ".join(
        [
            f"budget {o.get('budget', '-')}",
            f"time {'-' if t is None else fmt_time(t)}",
            f"policy {o.get('policy', '-')}",
            f"min speedup {fmt_ratio(o.get('min_speedup'))}",
            f"device {o.get('device', '-')}",
            f"apply {'yes' if o.get('apply') else 'no'}",
        ]
    )


def _undecided_example(t: Mapping[str, JSON], min_speedup: float) -> str | None:
    """The target's undecided interval as ``1.04x [0.26, 4.65]``, or None when it has none.

    From the evaluations' own flag (set by the oracle, whatever the target's bar), else from the
    target's best correct candidate measured against the run's bar.
    """
    for e in rows_of(Evaluation, t.get("trajectory")):
        if e.undecided:
            return fmt_speedup(e.speedup, e.speedup_ci)
    if undecided("not_faster", t.get("speedup_ci"), min_speedup):
        return fmt_speedup(t.get("speedup"), t.get("speedup_ci"))
    return None


def noise_line(report: Mapping[str, Any]) -> str:
    """One line when the machine was too noisy to decide a target that found no speedup, else ''."""
    min_speedup = finite((report.get("options") or {}).get("min_speedup")) or MIN_SPEEDUP
    targets = [t for t in report.get("targets") or [] if isinstance(t, Mapping) and t.get("status") == "no_speedup"]
    noisy = [(t, ex) for t in targets if (ex := _undecided_example(t, min_speedup)) is not None]
    if not noisy:
        return ""
    t, example = noisy[0]
    return (
        f"too noisy to decide: {len(noisy)} target(s) measured intervals too wide to call (e.g. {t.get('id', '?')} {example}); "
        "run again on a quieter machine (undecided verdicts are timed again, not reused)"
    )


def sandbox_weak(description: str | None) -> bool:
    """A verdict's sandbox that left something unenforced ("none", or a fallback that says what)."""
    text = description or ""
    return text.startswith("none") or "not enforced" in text


def sandbox_line(report: Mapping[str, Any]) -> str:
    """One line when a target's candidates ran without a full OS sandbox, else ''."""
    weak = [t for t in report.get("targets") or [] if isinstance(t, Mapping) and sandbox_weak(t.get("sandbox"))]
    if not weak:
        return ""
    t = weak[0]
    return (
        f"not fully sandboxed: {len(weak)} target(s) ran candidate code under {t.get('sandbox')} (e.g. {t.get('id', '?')}); "
        "install bubblewrap and use --maxcode-sandbox=auto"
    )


def range_line(t: Mapping[str, JSON]) -> str:
    """One line for a target whose best kernel is range-limited (right on the captured inputs,
    wrong on wider or special values), saying whether it is held back, else ''."""
    limited = t.get("range_limited") if isinstance(t, Mapping) else None
    if not limited:
        return ""
    if t.get("accept_range_limited") is True:
        held = "applied and proposed anyway: the target sets accept_range_limited"
    else:
        held = "not applied, no pull request; set accept_range_limited to accept it"
    return f"range-limited: {t.get('id', '?')}: {limited} ({held})"


#: repeats a quoted speedup is re-measured with, in the command every output prints
REMEASURE_REPEATS = 5


def remeasure_command(target_id: str, repeats: int = REMEASURE_REPEATS) -> str:
    """The command, run from the project's root, that re-measures a target's quoted speedup."""
    return f"maxcode remeasure {shlex.quote(target_id)} --repeat {repeats}"


def remeasure_text(t: TargetResult | Mapping[str, Any]) -> tuple[str, str] | None:
    """A quoted speedup's re-measure command and what each repeat should land in, or None (a
    typed target, as the bot holds it, or a report's JSON, as the renderers read it)."""
    r = t.remeasure if isinstance(t, TargetResult) else row_of(Remeasure, t.get("remeasure")) if isinstance(t, Mapping) else None
    if r is None or not r.command:
        return None
    expect = r.expect
    lo, hi = (finite(expect[0]), finite(expect[1])) if isinstance(expect, Sequence) and len(expect) == 2 else (None, None)
    where = f"each repeat should land in [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "no interval to land in"
    return str(r.command), where


def noise_text(t: TargetResult | Mapping[str, JSON]) -> str:
    """How the quoted speedup was measured and how noisy the machine was, in one phrase, or ''
    (a typed target or a report's JSON, as :func:`remeasure_text`)."""
    if isinstance(t, TargetResult):
        m = t.measurement
    else:
        raw = t.get("measurement") if isinstance(t, Mapping) else None
        m = Measurement.from_json(raw) if isinstance(raw, Mapping) else None
    if m is None:
        return ""
    parts = []
    blocks = [b for b in (finite(x) for x in m.blocks or []) if b is not None]
    if blocks:
        spread = finite(m.spread)
        parts.append(f"blocks {', '.join(f'{b:.3g}x' for b in blocks)}" + (f" (spread {spread:.2f}x)" if spread else ""))
    set_aside = int(finite(m.set_aside) or 0)
    parts.append(f"{set_aside} timed round(s) set aside: other work had the CPU" if set_aside else "no timed round disturbed")
    overhead, kernel = finite(m.call_overhead_us), finite(m.kernel_us)
    dispatched = finite(m.dispatch_overhead_us)
    if overhead is not None:
        parts.append(f"call overhead {overhead:.3g} us per call" + (f" beside {kernel:.3g} us of kernel" if kernel else "")
                     + (f" ({dispatched:.3g} us through the dispatcher, as your code calls it)" if dispatched is not None else ""))
    return "; ".join(parts)


def measurement_lines(t: Mapping[str, JSON]) -> list[str]:
    """Under a quoted speedup: how to re-measure it, and how noisy the machine was."""
    out = []
    cmd = remeasure_text(t)
    speed = fmt_speedup(t.get("speedup"), t.get("speedup_ci"))
    if cmd is not None:
        out.append(f"{t.get('id', '?')} {speed}: re-measure with `{cmd[0]}` ({cmd[1]})")
    noise = noise_text(t)
    if noise:
        out.append(f"{t.get('id', '?')} measured: {noise}")
    return out


def warning_lines(report: Mapping[str, Any]) -> list[str]:
    """What every rendering of a report says before the details: sandbox, range and noise warnings."""
    ranges = [range_line(t) for t in report.get("targets") or [] if isinstance(t, Mapping)]
    return [line for line in (sandbox_line(report), *ranges, noise_line(report)) if line]


_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """A trend in block characters, scaled between the smallest and the largest value."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12 * max(abs(hi), 1e-30):
        return _BARS[3] * len(values)
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / (hi - lo) * len(_BARS)))] for v in values)


#: the workload table's columns, in the markdown and the HTML report alike
WORKLOAD_HEADER = ("workload", "signature", "input sets", "reference", "candidate", "speedup")


def workload_cells(w: WorkloadResult) -> tuple[str, ...]:
    """One workload's row of :data:`WORKLOAD_HEADER` ("?" for a name an older row lacked)."""
    return (str(w.name) if w.given("name") else "?", str(w.signature), "-" if w.n_sets is None else str(w.n_sets),
            fmt_time(w.reference_s), fmt_time(w.candidate_s), fmt_speedup(w.speedup, w.speedup_ci))
