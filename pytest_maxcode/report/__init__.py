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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .._files import write_atomic
from ._format import SUMMARY_COLUMNS, finite, fmt_cost, fmt_time, machine_line, options_line, search_brief, summary_row
from ._html import render_html
from ._markdown import render_markdown

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "SUMMARY_COLUMNS",
    "fmt_time",
    "load_schema",
    "render_html",
    "render_markdown",
    "render_terminal",
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


def load_schema() -> dict[str, Any]:
    """The report's JSON Schema (draft 2020-12), read fresh so callers may mutate their copy."""
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


def validate(report: Any) -> list[str]:
    """Every way ``report`` breaks the schema, one message each (empty when it conforms).

    jsonschema is an optional dependency: only tools and tests that validate need it.
    """
    try:
        import jsonschema
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


def write_reports(report: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
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


def render_terminal(report: Mapping[str, Any], console: Console) -> None:
    """Print the summary table (and each target's one-line reason) to a rich console.

    Cells are rich ``Text``, never markup, so a ``[`` in a target id cannot restyle or break the table.
    """
    from rich.table import Table
    from rich.text import Text

    targets = report.get("targets") or []
    title = f"pytest-maxcode {report.get('tool_version', '?')}: {len(targets)} target(s)"
    table = Table(title=title, caption=machine_line(report), show_lines=False)
    for i, col in enumerate(SUMMARY_COLUMNS):
        # target ids stay on one line: a reader greps for them
        table.add_column(col, justify="right" if i in (1, 2, 3, 4) else "left", overflow="fold", no_wrap=(i == 0))
    for t in targets:
        row = summary_row(t)
        style = _STATUS_STYLE.get(str(t.get("status")), "")
        cells = [Text(c) for c in row]
        cells[5].stylize(style)
        table.add_row(*cells)
    console.print(table)
    console.print(Text(f"options: {options_line(report)}", style="dim"))
    searches = [t["search"] for t in targets if isinstance(t.get("search"), Mapping)]
    if searches:
        calls = sum(int(finite(s.get("llm_calls")) or 0) for s in searches)
        tokens = sum(int(finite(s.get("tokens")) or 0) for s in searches)
        cost = sum(finite(s.get("cost_usd")) or 0.0 for s in searches)
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
