"""The markdown summary: meant for a CI job summary or a pull-request comment."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..model.report import BenchmarkResult, Timing, WorkloadResult, rows_of
from . import _format as f

_MD_SPECIAL = "\\`*_|~#"


def md_escape(text: Any) -> str:
    """Text that renders literally in a GitHub table cell: no emphasis, no raw HTML, no broken columns."""
    s = " ".join(str(text).split())  # a newline would end the table row
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = "".join("\\" + c if c in _MD_SPECIAL else c for c in s)
    # Brackets stay readable ("2.31x [2.10, 2.52]"); only the "](" and "][" that would make a link are broken.
    return s.replace("](", "]\\(").replace("][", "]\\[")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return out


def summary_header() -> str:
    """The first line of the summary table (exposed so tests and tools can find the table)."""
    return _table(f.SUMMARY_COLUMNS, [])[0]


def _target_section(t: Mapping[str, Any]) -> list[str]:
    out = [f"## {md_escape(t.get('id', '?'))}", ""]
    out.append(f"**{md_escape(f.fmt_verdict(t))}**: {md_escape(t.get('reason', '') or '-')}")
    out.append("")
    out += [f"- {md_escape(fact)}" for fact in f.target_facts(t)]
    tests = t.get("tests")
    if isinstance(tests, Mapping) and tests.get("rerun"):
        out.append(f"- tests re-run: {md_escape(f.fmt_tests(tests))}")
        out += [f"  - {md_escape(n)}" for n in tests["rerun"]]
    out.append("")

    workloads = rows_of(WorkloadResult, t.get("workloads"))
    if workloads:
        out += ["### Workloads", ""]
        out += _table(f.WORKLOAD_HEADER, (f.workload_cells(w) for w in workloads))
        out.append("")

    benchmarks = rows_of(BenchmarkResult, t.get("benchmarks"))
    if benchmarks:
        out += ["### Benchmarks", ""]

        def timing(b: Timing | None) -> tuple[str, str, str]:
            b = b or Timing()
            mean_sd = f"{f.fmt_time(b.mean_s)} ± {f.fmt_time(b.stddev_s)}"
            return f.fmt_time(b.median_s), mean_sd, "-" if b.rounds is None else str(b.rounds)

        rows = []
        for b in benchmarks:
            r, c = timing(b.reference), timing(b.candidate)
            rows.append((str(b.name) if b.given("name") else "?", r[0], c[0], r[1], c[1], f"{r[2]} / {c[2]}", f.fmt_speedup(b.speedup, b.speedup_ci)))
        out += _table(
            (
                "benchmark",
                "reference median",
                "candidate median",
                "reference mean ± sd",
                "candidate mean ± sd",
                "rounds (ref / cand)",
                "speedup",
            ),
            rows,
        )
        out.append("")
    return out


def _code_spans(line: str) -> str:
    """A line whose one backticked command stays a code span; the rest is escaped text."""
    head, sep, rest = line.partition("`")
    cmd, sep2, tail = rest.partition("`")
    if not (sep and sep2):
        return md_escape(line)
    fence = "``" if "`" in cmd else "`"
    return f"{_spaced(head)}{fence}{cmd}{fence}{_spaced(tail)}"


def _spaced(text: str) -> str:
    """Escaped text that keeps one space at either end where it had one (beside a code span)."""
    return (" " if text[:1].isspace() else "") + md_escape(text) + (" " if text[-1:].isspace() else "")


def render_markdown(report: Mapping[str, Any]) -> str:
    """The whole report as GitHub-flavoured markdown."""
    targets = report.get("targets") or []
    out = [
        "# pytest-maxcode report",
        "",
        f"pytest-maxcode {md_escape(report.get('tool_version', '?'))}, {md_escape(report.get('created_at', '?'))}  ",
        f"Machine: {md_escape(f.machine_line(report))}  ",
        f"Options: {md_escape(f.options_line(report))}",
        "",
    ]
    if not targets:
        out += ["No targets were optimized.", ""]
        return "\n".join(out)
    out += _table(f.SUMMARY_COLUMNS, (f.summary_row(t) for t in targets))
    out.append("")
    for warning in f.warning_lines(report):
        out += [f"**{md_escape(warning)}**", ""]
    measured = [line for t in targets for line in f.measurement_lines(t)]
    if measured:
        out += ["Reproduce (run from the project's root):", ""]
        out += [f"- {_code_spans(line)}" for line in measured]
        out.append("")
    for t in targets:
        out += _target_section(t)
    return "\n".join(out).rstrip("\n") + "\n"
