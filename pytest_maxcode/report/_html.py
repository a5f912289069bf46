"""The HTML report: one self-contained file (inline CSS and hand-written SVG, no scripts, no network).

It is meant to be kept as a CI artifact and opened years later, offline, so it depends on nothing.
"""

from __future__ import annotations

import html
import math
from typing import Any, Iterable, Mapping, Sequence

from . import _format as f

# Plot geometry, in SVG user units.
_W, _H = 640, 280
_ML, _MR, _MT, _MB = 56, 76, 32, 42
_OK, _BAD, _LINE = "#1a7f37", "#cf222e", "#0969da"

_CSS = """
body{font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1em;margin-bottom:.3em}
.meta{color:#59636e;margin:.1em 0}
table{border-collapse:collapse;margin:.5em 0 1em}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;padding:1px 4px;border-radius:4px}
.verified{color:#1a7f37;font-weight:600}.not_verified,.no_speedup{color:#9a6700;font-weight:600}
.skipped{color:#59636e;font-weight:600}.failed{color:#cf222e;font-weight:600}
.empty{color:#59636e;font-style:italic;border:1px dashed #d0d7de;padding:2em;text-align:center;width:560px}
svg text{font:11px -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;fill:#1f2328}
""".strip()


def esc(x: Any) -> str:
    """Everything from the report is untrusted text (ids, reasons, paths): escape it, quotes included."""
    return html.escape(str(x), quote=True)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (), classes: Sequence[str] | None = None) -> str:
    """An HTML table of plain-text cells; ``classes`` optionally styles the cell in the verdict column."""
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>", "<tbody>"]
    for i, row in enumerate(rows):
        cells = []
        for j, cell in enumerate(row):
            cls = []
            if j in numeric:
                cls.append("num")
            if classes is not None and header[j] == "verdict":
                cls.append(classes[i])
            attr = f' class="{esc(" ".join(cls))}"' if cls else ""
            cells.append(f"<td{attr}>{esc(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def _nice_step(span: float, target_ticks: int = 5) -> float:
    """A 1/2/5 x 10^k step giving about ``target_ticks`` ticks over ``span``: labels people can read."""
    raw = span / max(target_ticks, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _fmt_tick(v: float) -> str:
    return f"{v:.10g}" if abs(v - round(v)) > 1e-9 else str(int(round(v)))


def trajectory_svg(trajectory: Sequence[Mapping[str, Any]], min_speedup: float | None, title: str = "") -> str:
    """Best-so-far speedup against evaluation index, with each evaluation's own result as a dot.

    Dashed lines mark 1.0x (no change) and the run's minimum speedup, so it shows at a glance
    whether and when the search crossed the bar. Failed evaluations without a speedup sit on the x axis.
    """
    n = len(trajectory)
    if n == 0:
        return '<p class="empty">no evaluations</p>'
    speedups = [f.finite(e.get("speedup")) for e in trajectory]
    best = [f.finite(e.get("best_so_far")) for e in trajectory]
    minsp = f.finite(min_speedup)
    values = [v for v in speedups + best if v is not None] + [1.0] + ([minsp] if minsp is not None else [])
    step = _nice_step(max(values) * 1.05)
    ymax = step * math.ceil(max(values) * 1.05 / step)

    pw, ph = _W - _ML - _MR, _H - _MT - _MB

    def x(i: int) -> float:  # i is 1-based
        return _ML + (pw / 2 if n == 1 else (i - 1) * pw / (n - 1))

    def y(v: float) -> float:
        return _MT + ph - (v / ymax) * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" '
        f'aria-label="{esc(title or "best-so-far speedup")}">',
        f"<title>{esc(title or 'best-so-far speedup')}</title>",
        f'<rect x="{_ML}" y="{_MT}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#d0d7de"/>',
    ]
    # y axis: grid lines and labels
    k = 0
    while k * step <= ymax + 1e-12:
        v = k * step
        yy = y(v)
        parts.append(f'<line x1="{_ML - 4}" y1="{yy:.1f}" x2="{_ML + pw}" y2="{yy:.1f}" stroke="#eaeef2"/>')
        parts.append(f'<text x="{_ML - 7}" y="{yy + 4:.1f}" text-anchor="end">{esc(_fmt_tick(v))}</text>')
        k += 1
    # x axis: integer ticks, at most about 10 labels
    xstep = max(1, int(_nice_step(n - 1 if n > 1 else 1, 8)))
    ticks = sorted({1, n, *range(xstep, n + 1, xstep)})
    if len(ticks) > 2 and ticks[-1] - ticks[-2] < xstep / 2:
        ticks.pop(-2)  # keep the last label from colliding with its neighbour
    for i in ticks:
        xx = x(i)
        parts.append(f'<line x1="{xx:.1f}" y1="{_MT + ph}" x2="{xx:.1f}" y2="{_MT + ph + 4}" stroke="#59636e"/>')
        parts.append(f'<text x="{xx:.1f}" y="{_MT + ph + 16}" text-anchor="middle">{i}</text>')
    parts.append(f'<text x="{_ML + pw / 2:.1f}" y="{_H - 6}" text-anchor="middle">evaluation</text>')
    parts.append(
        f'<text x="14" y="{_MT + ph / 2:.1f}" text-anchor="middle" transform="rotate(-90 14 {_MT + ph / 2:.1f})">speedup (x)</text>'
    )
    # reference lines: 1.0x and the bar a speedup has to clear
    refs = [(1.0, "1.0x", "#59636e")]
    if minsp is not None and abs(minsp - 1.0) > 1e-9:
        refs.append((minsp, f"min {minsp:.2f}x", "#9a6700"))
    label_y = [y(v) for v, _, _ in refs]
    if len(refs) == 2 and abs(label_y[0] - label_y[1]) < 12:  # close lines: spread their labels apart
        mid, sign = (label_y[0] + label_y[1]) / 2, (1 if label_y[0] >= label_y[1] else -1)
        label_y = [mid + 6 * sign, mid - 6 * sign]
    for (v, label, colour), ly in zip(refs, label_y):
        yy = y(v)
        parts.append(
            f'<line x1="{_ML}" y1="{yy:.1f}" x2="{_ML + pw}" y2="{yy:.1f}" stroke="{colour}" stroke-dasharray="5 4"/>'
        )
        parts.append(f'<text x="{_ML + pw + 4}" y="{ly + 4:.1f}" style="fill:{colour}">{esc(label)}</text>')
    # best-so-far as a step line: it holds its value until an evaluation beats it
    pts: list[str] = []
    prev: float | None = None
    for i, b in enumerate(best, start=1):
        if b is None:
            continue
        if prev is not None and b != prev:
            pts.append(f"{x(i):.1f},{y(prev):.1f}")
        pts.append(f"{x(i):.1f},{y(b):.1f}")
        prev = b
    if pts:
        if len(pts) == 1:
            parts.append(f'<circle cx="{pts[0].split(",")[0]}" cy="{pts[0].split(",")[1]}" r="2" fill="{_LINE}"/>')
        parts.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{_LINE}" stroke-width="2"/>')
    # one dot per evaluation, coloured by whether the candidate was correct
    for i, (e, s) in enumerate(zip(trajectory, speedups), start=1):
        status = str(e.get("status", "?"))
        ok = status in f.CORRECT_STATUSES
        cy = y(s) if s is not None else _MT + ph
        tip = f"#{i} {status}, speedup {f.fmt_ratio(s)}, origin {e.get('origin', '?')}, hash {str(e.get('hash', ''))[:12]}"
        fill = _OK if ok else _BAD
        parts.append(
            f'<circle cx="{x(i):.1f}" cy="{cy:.1f}" r="4" fill="{fill}" stroke="#ffffff" stroke-width="1" '
            f'data-status="{esc(status)}"><title>{esc(tip)}</title></circle>'
        )
    # legend, in the top margin where no data or reference label can reach it
    lx, ly = _ML, _MT - 12
    parts += [
        f'<line x1="{lx}" y1="{ly}" x2="{lx + 14}" y2="{ly}" stroke="{_LINE}" stroke-width="2"/>',
        f'<text x="{lx + 18}" y="{ly + 4}">best so far</text>',
        f'<circle cx="{lx + 97}" cy="{ly}" r="4" fill="{_OK}"/>',
        f'<text x="{lx + 105}" y="{ly + 4}">correct</text>',
        f'<circle cx="{lx + 164}" cy="{ly}" r="4" fill="{_BAD}"/>',
        f'<text x="{lx + 172}" y="{ly + 4}">failed (no speedup: on the x axis)</text>',
    ]
    parts.append("</svg>")
    return "\n".join(parts)


def _target_section(t: Mapping[str, Any], min_speedup: float | None, anchor: str) -> str:
    status = str(t.get("status", "?"))
    out = [
        f'<section id="{esc(anchor)}">',
        f"<h2>{esc(t.get('id', '?'))}</h2>",
        f'<p><span class="{esc(status)}">{esc(f.fmt_verdict(t))}</span>: {esc(t.get("reason", "") or "-")}</p>',
        "<ul>",
        *(f"<li>{esc(fact)}</li>" for fact in f.target_facts(t)),
    ]
    tests = t.get("tests")
    if isinstance(tests, Mapping) and tests.get("rerun"):
        items = "".join(f"<li><code>{esc(n)}</code></li>" for n in tests["rerun"])
        out.append(f"<li>tests re-run: {esc(f.fmt_tests(tests))}<ul>{items}</ul></li>")
    out.append("</ul>")

    out.append("<h3>Search trajectory</h3>")
    out.append(trajectory_svg(t.get("trajectory") or [], min_speedup, title=f"{t.get('id', '?')}: best-so-far speedup"))

    workloads = t.get("workloads") or []
    if workloads:
        out.append("<h3>Workloads</h3>")
        out.append(
            _table(
                ("workload", "signature", "input sets", "reference", "candidate", "speedup"),
                [
                    (
                        str(w.get("name", "?")),
                        str(w.get("signature", "")),
                        str(w.get("n_sets", "-")),
                        f.fmt_time(w.get("reference_s")),
                        f.fmt_time(w.get("candidate_s")),
                        f.fmt_speedup(w.get("speedup"), w.get("speedup_ci")),
                    )
                    for w in workloads
                ],
                numeric=(2, 3, 4, 5),
            )
        )
    benchmarks = t.get("benchmarks") or []
    if benchmarks:
        rows = []
        for b in benchmarks:
            r = b.get("reference") if isinstance(b.get("reference"), Mapping) else {}
            c = b.get("candidate") if isinstance(b.get("candidate"), Mapping) else {}
            rows.append(
                (
                    str(b.get("name", "?")),
                    f.fmt_time(r.get("median_s")),
                    f.fmt_time(c.get("median_s")),
                    f"{f.fmt_time(r.get('mean_s'))} ± {f.fmt_time(r.get('stddev_s'))}",
                    f"{f.fmt_time(c.get('mean_s'))} ± {f.fmt_time(c.get('stddev_s'))}",
                    f"{r.get('rounds', '-')} / {c.get('rounds', '-')}",
                    f.fmt_ratio(b.get("speedup")),
                )
            )
        out.append("<h3>Benchmarks</h3>")
        out.append(
            _table(
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
                numeric=(1, 2, 3, 4, 5, 6),
            )
        )
    out.append("</section>")
    return "\n".join(out)


def render_html(report: Mapping[str, Any]) -> str:
    """The whole report as one standalone HTML page."""
    targets = report.get("targets") or []
    min_speedup = f.finite((report.get("options") or {}).get("min_speedup"))
    body = [
        "<h1>pytest-maxcode report</h1>",
        f'<p class="meta">pytest-maxcode {esc(report.get("tool_version", "?"))}, {esc(report.get("created_at", "?"))}</p>',
        f'<p class="meta">Machine: {esc(f.machine_line(report))}</p>',
        f'<p class="meta">Options: {esc(f.options_line(report))}</p>',
    ]
    if targets:
        body.append(
            _table(
                f.SUMMARY_COLUMNS,
                [f.summary_row(t) for t in targets],
                numeric=(1, 2, 3, 4),
                classes=[str(t.get("status", "")) for t in targets],
            )
        )
        body += [_target_section(t, min_speedup, f"target-{i}") for i, t in enumerate(targets)]
    else:
        body.append("<p>No targets were optimized.</p>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>pytest-maxcode report {esc(report.get('created_at', ''))}</title>\n"
        f"<style>\n{_CSS}\n</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
