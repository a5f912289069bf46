"""The report of a ``pytest --maxcode`` run: its JSON schema, validation, and the files people read.

A run produces one report dict (see ``schema.json``). From it this package writes
``report.json`` (for tools), ``summary.md`` (for CI summaries and pull-request comments)
and ``report.html`` (a standalone page with, per target, the search trajectory, the search
tree and the best-so-far curve of each strategy),
and prints the same summary table to the terminal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import write_atomic
from ..model.jsontypes import JSON
from ..model.report import SearchSummary, row_of
from ._format import (
    REMEASURE_REPEATS,
    SUMMARY_COLUMNS,
    finite,
    fmt_cost,
    fmt_counts,
    fmt_time,
    machine_line,
    measurement_lines,
    noise_text,
    options_line,
    remeasure_command,
    remeasure_text,
    sandbox_weak,
    search_brief,
    sparkline,
    summary_row,
    warning_lines,
)
from ._html import curves_svg, render_html
from ._markdown import md_escape, render_markdown

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "REMEASURE_REPEATS",
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "SUMMARY_COLUMNS",
    "curves_svg",
    "fmt_time",
    "load_schema",
    "md_escape",
    "measurement_lines",
    "noise_text",
    "remeasure_command",
    "remeasure_text",
    "render_html",
    "render_markdown",
    "render_terminal",
    "sandbox_weak",
    "sparkline",
    "validate",
    "write_reports",
]

SCHEMA_PATH: Path = Path(__file__).with_name("schema.json")
SCHEMA_VERSION = 1

REPORT_FILES = {"json": "report.json", "markdown": "summary.md", "html": "report.html"}

_STATUS_STYLE = {
    "verified": "bold green",
    "not_verified": "yellow",
    "no_speedup": "yellow",
    "skipped": "dim",
    "failed": "bold red",
}


def load_schema() -> dict[str, JSON]:
    """The report's JSON Schema (draft 2020-12), read fresh so callers may mutate their copy."""
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        schema: dict[str, JSON] = json.load(fh)
    return schema


def validate(report: object) -> list[str]:
    """Every way ``report`` breaks the schema, one message each (empty when it conforms).

    jsonschema is an optional dependency: only tools and tests that validate need it.
    """
    try:
        import jsonschema  # an optional dependency, imported when used: keeps start-up fast
    except ImportError as e:
        raise ImportError(
            "validating a maxcode report needs the jsonschema package: pip install jsonschema "
            "(or pip install 'pytest-maxcode[test]')"
        ) from e
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(report), key=lambda err: (list(map(str, err.absolute_path)), err.message))
    out = []
    for err in errors:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{where}: {err.message}")
    return out


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinity: such numbers become null rather than producing an unreadable file."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def write_reports(report: Mapping[str, JSON], out_dir: Path) -> dict[str, Path]:
    """Write ``report.json``, ``summary.md`` and ``report.html`` into ``out_dir`` (created if needed).

    Returns the paths keyed ``json``, ``markdown`` and ``html``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = _finite(report)
    texts = {
        "json": json.dumps(clean, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
        "markdown": render_markdown(clean),
        "html": render_html(clean),
    }
    paths: dict[str, Path] = {}
    for key, name in REPORT_FILES.items():
        path = out_dir / name
        write_atomic(path, texts[key])
        paths[key] = path
    return paths


#: the narrow table (an 80-column terminal): columns of :data:`SUMMARY_COLUMNS` by index, with
#: shorter headers; the workload counts and times are left to the files
NARROW_COLUMNS: tuple[tuple[int, str], ...] = ((0, "target"), (4, "speedup"), (5, "verdict"), (6, "tried/ok/failed"), (7, "tests"))
#: free-text columns: (smallest width, largest width worth giving); the rest never wrap
_FLEXIBLE = {0: (10, 40), 6: (16, 60), 7: (8, 40)}


def _widths(rows: list[list[str]], columns: tuple[tuple[int, str], ...], width: int) -> dict[int, int] | None:
    """Content widths that fit ``width``, or None when they cannot: numbers and verdicts as wide
    as their cells, then the target id, the tests and the candidates up to what they need (rich
    left alone squeezes free text to nothing and cuts numbers short)."""
    def longest(i: int, header: str) -> int:
        return max([len(header), *(len(r[i]) for r in rows)])

    chrome = 3 * len(columns) + 1  # a space either side of each cell, one between cells, the edges
    out = {i: longest(i, h) for i, h in columns if i not in _FLEXIBLE}
    flexible = [(i, h) for i, h in columns if i in _FLEXIBLE]
    free = width - chrome - sum(out.values())
    want = {i: min(longest(i, h), _FLEXIBLE[i][1]) for i, h in flexible}
    low = {i: min(_FLEXIBLE[i][0], want[i]) for i, _ in flexible}
    if free < sum(low.values()):
        return None
    out.update(low)
    free -= sum(low.values())
    for i in (0, 7, 6):  # the id first, then the tests, then the failures by kind
        if i in want:
            extra = min(free, want[i] - out[i])
            out[i] += extra
            free -= extra
    return out


def _below_table(targets: list[Any], report: Mapping[str, Any], console: Console) -> None:
    """The lines under the table: what the searches cost, each target's reason, the warnings,
    and how to re-measure each quoted speedup."""
    from rich.text import Text  # as in render_terminal: keeps start-up fast

    searches = [s for t in targets if (s := row_of(SearchSummary, t.get("search"))) is not None]
    if searches:
        calls = sum(int(finite(s.llm_calls) or 0) for s in searches)
        tokens = sum(int(finite(s.tokens) or 0) for s in searches)
        cost = sum(finite(s.cost_usd) or 0.0 for s in searches)
        console.print(Text(f"search: {calls:,} LLM calls, {tokens:,} tokens, {fmt_cost(cost)} in all", style="dim"))
    for t in targets:
        reason = str(t.get("reason") or "")
        brief = search_brief(t.get("search"))
        if reason or brief:
            line = Text()
            line.append(str(t.get("id", "?")), style="bold")
            if reason:
                line.append(f": {reason}")
            if brief:
                line.append(f" ({brief})", style="dim")
            console.print(line)
    for warning in warning_lines(report):
        console.print(Text(warning, style="bold yellow"))
    for t in targets:
        for line in measurement_lines(t):
            console.print(Text(line, style="dim"))


def render_terminal(report: Mapping[str, Any], console: Console) -> None:
    """Print the summary table (and each target's one-line reason) to a rich console.

    Cells are rich ``Text``, never markup, so a ``[`` in a target id cannot restyle or break the table.
    It stays readable in 80 columns: where the full table does not fit, the narrow one
    (:data:`NARROW_COLUMNS`) leaves the times and workload counts to the files; numbers and
    verdicts never wrap (no ``no_speed``/``up``), a long target id ends in an ellipsis (the lines
    below the table name it in full), and only the free-text columns wrap, between words.
    """
    # rich is imported when a table is printed, not with the plugin: keeps start-up fast
    from rich import box
    from rich.table import Table
    from rich.text import Text

    targets = report.get("targets") or []
    rows = [summary_row(t) for t in targets]
    columns: tuple[tuple[int, str], ...] = tuple(enumerate(SUMMARY_COLUMNS))
    widths = _widths(rows, columns, console.width)
    if widths is None:  # the narrow table: the failures by kind and the weak-check flag are in the reports
        for t, row in zip(targets, rows):
            row[5], row[6] = str(t.get("status", "?")), fmt_counts(t.get("candidates"))
        columns = NARROW_COLUMNS
        widths = _widths(rows, columns, console.width) or {}
    title = f"pytest-maxcode {report.get('tool_version', '?')}: {len(targets)} target(s)"
    table = Table(title=title, caption=machine_line(report), show_lines=False, box=box.SIMPLE_HEAD)
    for i, header in columns:
        if i == 0:  # target ids stay on one line: a reader greps for them
            table.add_column(header, no_wrap=True, overflow="ellipsis", width=widths.get(i))
        elif i in (1, 2, 3, 4, 5):
            table.add_column(header, justify="right" if i < 5 else "left", no_wrap=True, overflow="ellipsis", width=widths.get(i))
        else:
            table.add_column(header, overflow="fold", width=widths.get(i))
    for t, row in zip(targets, rows):
        style = _STATUS_STYLE.get(str(t.get("status")), "")
        cells = [Text(c) for c in row]
        cells[5].stylize(style)
        table.add_row(*(cells[i] for i, _ in columns))
    console.print(table)
    console.print(Text(f"options: {options_line(report)}", style="dim"))
    _below_table(targets, report, console)
