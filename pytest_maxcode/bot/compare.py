"""``maxcode compare BASE HEAD``: did a change make any benchmark slower?

Statistics rather than a flaky threshold: a benchmark regressed only when its median got
slower by more than the threshold (10% unless ``[tool.maxcode.regressions]`` says
otherwise for it) *and* the slowdown is statistically significant. With raw timings
(pytest-benchmark's ``--benchmark-json`` keeps them) that is a one-sided Mann-Whitney U test,
Holm-corrected over all benchmarks compared; without them, the two runs' 95% intervals of
the mean must not overlap. The change's interval comes from the medians' own intervals.

Inputs are pytest-benchmark JSON files or maxcode reports (their re-run benchmarks'
reference side, i.e. the user's own code).
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MaxcodeError
from ..model.report import BenchmarkResult, rows_of
from ..report import fmt_time, sparkline
from ..tables import DEFAULT_THRESHOLD, Regressions, parse_regressions
from .pr_body import code

ALPHA = 0.05
#: the method of ``maxcode bench-ab``'s comparisons (bench.ab.judge), as reports name it
RUNS_METHOD = "mann-whitney beyond the threshold on runs"


@dataclass
class Timings:
    name: str
    median_s: float
    mean_s: float
    stddev_s: float
    rounds: int
    data: list[float] | None = None  # raw per-round times, when saved


@dataclass
class Comparison:
    name: str
    base_median_s: float
    head_median_s: float
    change: float  # head/base - 1: +0.2 is 20% slower
    change_ci: list[float] | None
    threshold: float
    method: str  # "mann-whitney" | "intervals"
    p_value: float | None = None
    significant: bool = False
    verdict: str = "unchanged"  # "regressed" | "improved" | "unchanged"


@dataclass
class CompareResult:
    base: str
    head: str
    comparisons: list[Comparison] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)
    base_commit: str | None = None  # the commits measured, named in the comment
    head_commit: str | None = None
    unit: str = "s"  # "s", or "instructions" when counted under callgrind
    baseline: str | None = None  # where the base's figures came from, when not measured beside the head's
    trends: dict[str, list[float]] = field(default_factory=dict)  # benchmark -> the base branch's recent medians
    #: the command that measures the same two commits the same way again (bench-ab's; from the project folder)
    remeasure: str | None = None

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.verdict == "regressed"]

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base, "head": self.head, "regressions": len(self.regressions),
            "improvements": sum(c.verdict == "improved" for c in self.comparisons),
            "comparisons": [asdict(c) for c in self.comparisons],
            "only_base": self.only_base, "only_head": self.only_head,
            "base_commit": self.base_commit, "head_commit": self.head_commit, "unit": self.unit,
            "baseline": self.baseline, "trends": self.trends, "remeasure": self.remeasure,
        }


def load_timings(path: Path) -> dict[str, Timings]:
    """Benchmarks by full name, from a pytest-benchmark JSON file or a maxcode report."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise MaxcodeError(f"{path}: no such file (write one with pytest --benchmark-json=PATH)") from None
    except (OSError, ValueError) as e:
        raise MaxcodeError(f"{path}: not a JSON file ({e})") from None
    if isinstance(data, Mapping) and isinstance(data.get("benchmarks"), list):
        out = {}
        for b in data["benchmarks"]:
            st = b.get("stats") or {}
            try:
                out[str(b["fullname"])] = Timings(str(b["fullname"]), float(st["median"]), float(st["mean"]),
                                                  float(st["stddev"]), int(st["rounds"]), _floats(st.get("data")))
            except (KeyError, TypeError, ValueError):
                raise MaxcodeError(f"{path}: benchmark {b.get('fullname', '?')!r} has no median/mean/stddev/rounds; "
                                   "is this pytest-benchmark's --benchmark-json output?") from None
        return out
    if isinstance(data, Mapping) and isinstance(data.get("targets"), list):
        out = {}
        for t in data["targets"]:
            for b in rows_of(BenchmarkResult, t.get("benchmarks")):
                r = b.reference
                if r is not None and r.median_s is not None:
                    out[str(b.name)] = Timings(str(b.name), float(r.median_s), float(r.median_s if r.mean_s is None else r.mean_s),
                                               float(r.stddev_s or 0.0), int(1 if r.rounds is None else r.rounds))
        return out
    raise MaxcodeError(f"{path}: neither a pytest-benchmark JSON file (a 'benchmarks' list) nor a maxcode report (a 'targets' list)")


def _floats(values: Any) -> list[float] | None:
    if not isinstance(values, list) or len(values) < 2:
        return None
    return [float(v) for v in values]


def thresholds_from(table: Regressions | Mapping[str, Any] | None) -> tuple[float, dict[str, float]]:
    """``[tool.maxcode.regressions]`` (parsed, or a raw table): ``threshold`` and per-benchmark
    ``thresholds`` (globs)."""
    try:
        regressions = parse_regressions(table)
    except ValueError as e:
        raise MaxcodeError(str(e)) from None
    return regressions.threshold, dict(regressions.thresholds or {})


def threshold_for(name: str, default: float, per: Mapping[str, float]) -> float:
    for pattern, value in per.items():
        if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name.split("::")[-1], pattern):
            return value
    return default


#: each median's own interval at 97.47%, so that both hold at once with 95% probability
Z_EACH = 2.237


def _median_interval(data: Sequence[float]) -> tuple[float, float]:
    """Distribution-free interval of a median: order statistics around the middle (the
    binomial's normal approximation), exact for any shape of timing distribution."""
    x = sorted(data)
    n = len(x)
    half = Z_EACH * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return x[lo], x[hi]


def _ratio_interval(base: Sequence[float], head: Sequence[float]) -> list[float]:
    """A 95% (at least) interval of median(head)/median(base) - 1 from the medians' intervals."""
    bl, bh = _median_interval(base)
    hl, hh = _median_interval(head)
    return [hl / max(bh, 1e-18) - 1.0, hh / max(bl, 1e-18) - 1.0]


def _mean_interval(t: Timings) -> tuple[float, float]:
    half = 1.96 * t.stddev_s / math.sqrt(max(1, t.rounds))
    return t.mean_s - half, t.mean_s + half


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: many benchmarks compared at once do not multiply false alarms.

    Public: the interleaved regression mode (``bench/ab.py``) corrects its p-values the same way.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def compare(base: Mapping[str, Timings], head: Mapping[str, Timings], *, threshold: float = DEFAULT_THRESHOLD,
            thresholds: Mapping[str, float] | None = None, base_label: str = "base", head_label: str = "head") -> CompareResult:
    # scipy loads in a second: imported when used, keeps start-up fast
    from scipy.stats import mannwhitneyu

    result = CompareResult(base_label, head_label, only_base=sorted(set(base) - set(head)), only_head=sorted(set(head) - set(base)))
    raw_p: list[tuple[Comparison, float]] = []
    for name in sorted(set(base) & set(head)):
        b, h = base[name], head[name]
        change = h.median_s / max(b.median_s, 1e-18) - 1.0
        c = Comparison(name, b.median_s, h.median_s, change, None, threshold_for(name, threshold, thresholds or {}), "intervals")
        if b.data and h.data:
            c.method = "mann-whitney"
            c.change_ci = _ratio_interval(b.data, h.data)
            side = "greater" if change > 0 else "less"
            raw_p.append((c, float(mannwhitneyu(h.data, b.data, alternative=side).pvalue)))
        else:
            (bl, bh), (hl, hh) = _mean_interval(b), _mean_interval(h)
            c.change_ci = [hl / max(bh, 1e-18) - 1.0, hh / max(bl, 1e-18) - 1.0] if bl > 0 else None
            c.significant = hl > bh or hh < bl
        result.comparisons.append(c)
    for (c, _), p in zip(raw_p, holm([p for _, p in raw_p])):
        c.p_value = p
        c.significant = p < ALPHA
    for c in result.comparisons:
        if c.significant and c.change > c.threshold:
            c.verdict = "regressed"
        elif c.significant and c.change < -c.threshold:
            c.verdict = "improved"
    return result


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _method_text(result: CompareResult) -> str:
    methods = {c.method for c in result.comparisons}
    if methods == {"instructions"}:
        return "instruction counts under callgrind: deterministic, so the threshold alone decides"
    if methods == {RUNS_METHOD}:
        return ("base and head run alternately in short processes, each process's fastest round one sample; "
                "one-sided Mann-Whitney test of a change beyond the threshold on those, Holm-corrected")
    return "one-sided Mann-Whitney U on raw timings, Holm-corrected; else non-overlapping 95% intervals"


def _figure(x: float, unit: str) -> str:
    if unit == "instructions":
        for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if abs(x) >= scale:
                return f"{x / scale:.4g} {suffix}instr"
        return f"{x:.0f} instr"
    return fmt_time(x)


def _commits(result: CompareResult) -> str:
    """Which two commits were measured: a comment on a pull request outlives its pushes."""
    def one(label: str, sha: str | None) -> str:
        return f"`{label}` ({sha[:12]})" if sha and sha[:12] not in label else f"`{label}`"
    return f"Base {one(result.base, result.base_commit)}, head {one(result.head, result.head_commit)}."


def markdown(result: CompareResult) -> str:
    n = len(result.regressions)
    improved = sum(c.verdict == "improved" for c in result.comparisons)
    if not result.comparisons:
        head = "**No benchmark ran on both sides**, so there is nothing to compare."
    elif n:
        head = f"**{n} regression{'s' if n != 1 else ''}** in {len(result.comparisons)} benchmark(s)"
    else:
        head = f"**No regressions** in {len(result.comparisons)} benchmark(s)"
    if improved:
        head += f"; {improved} faster"
    what = "instructions" if result.unit == "instructions" else "median"
    trend = bool(result.trends)
    lines = [f"### ⏱ Performance: {head}", "", _commits(result)
             + (f" The base's figures: {result.baseline}." if result.baseline else "")
             + (f" Re-measure from the repository's root: {code(result.remeasure)}"
                + (" (it measures the base as well)." if result.baseline else ".") if result.remeasure else ""), "",
             ("A regression is a slowdown beyond the threshold that is also statistically significant "
              f"({_method_text(result)})."), "",
             f"| benchmark | base ({what}) | head ({what}) | change (95% CI) | p | threshold | |" + (" base trend |" if trend else ""),
             "|---|---:|---:|---:|---:|---:|---|" + ("---|" if trend else "")]
    icon = {"regressed": "🔴 slower", "improved": "🟢 faster", "unchanged": ""}
    for c in sorted(result.comparisons, key=lambda c: (c.verdict != "regressed", -c.change)):
        ci = f" [{_pct(c.change_ci[0])}, {_pct(c.change_ci[1])}]" if c.change_ci else ""
        p = f"{c.p_value:.2g}" if c.p_value is not None else ("sig." if c.significant else "n.s.")
        row = (f"| `{c.name}` | {_figure(c.base_median_s, result.unit)} | {_figure(c.head_median_s, result.unit)} | "
               f"{_pct(c.change)}{ci} | {p} | {100 * c.threshold:.0f}% | {icon[c.verdict]} |")
        if trend:
            points = result.trends.get(c.name) or []
            row += f" {sparkline(points)} ({len(points)})" + " |" if points else " |"
        lines.append(row)
    for label, names in (("only in base", result.only_base), ("only in head", result.only_head)):
        if names:
            lines += ["", f"{label}: " + ", ".join(f"`{x}`" for x in names)]
    if trend:
        lines += ["", "Base trend: the base branch's stored medians, oldest first (the number of runs in brackets)."]
    return "\n".join(lines) + "\n"
