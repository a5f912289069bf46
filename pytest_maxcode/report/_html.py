"""The HTML report: one self-contained file (inline CSS and hand-written SVG, no scripts, no network).

It is meant to be kept as a CI artifact and opened years later, offline, so it depends on nothing.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.jsontypes import JSON
from ..model.report import (
    BenchmarkResult,
    Evaluation,
    SearchSummary,
    Timing,
    WorkloadResult,
    row_of,
    rows_of,
)
from . import _format as f
from .tree import best_key, best_so_far_curve

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
.scroll{overflow-x:auto}
svg text{font:11px -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;fill:#1f2328}
""".strip()


def esc(x: object) -> str:
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


def _axes(n: int, ymax: float, step: float, x: Callable[[int], float], y: Callable[[float], float], xlabel: str) -> list[str]:
    """Grid, y labels, integer x ticks (about 10 at most) and both axis titles of a speedup plot."""
    pw, ph = _W - _ML - _MR, _H - _MT - _MB
    parts: list[str] = []
    k = 0
    while k * step <= ymax + 1e-12:
        v = k * step
        yy = y(v)
        parts.append(f'<line x1="{_ML - 4}" y1="{yy:.1f}" x2="{_ML + pw}" y2="{yy:.1f}" stroke="#eaeef2"/>')
        parts.append(f'<text x="{_ML - 7}" y="{yy + 4:.1f}" text-anchor="end">{esc(_fmt_tick(v))}</text>')
        k += 1
    xstep = max(1, int(_nice_step(n - 1 if n > 1 else 1, 8)))
    ticks = sorted({1, n, *range(xstep, n + 1, xstep)})
    if len(ticks) > 2 and ticks[-1] - ticks[-2] < xstep / 2:
        ticks.pop(-2)  # keep the last label from colliding with its neighbour
    for i in ticks:
        xx = x(i)
        parts.append(f'<line x1="{xx:.1f}" y1="{_MT + ph}" x2="{xx:.1f}" y2="{_MT + ph + 4}" stroke="#59636e"/>')
        parts.append(f'<text x="{xx:.1f}" y="{_MT + ph + 16}" text-anchor="middle">{i}</text>')
    parts.append(f'<text x="{_ML + pw / 2:.1f}" y="{_H - 6}" text-anchor="middle">{esc(xlabel)}</text>')
    parts.append(
        f'<text x="14" y="{_MT + ph / 2:.1f}" text-anchor="middle" transform="rotate(-90 14 {_MT + ph / 2:.1f})">speedup (x)</text>'
    )
    return parts


def _ref_lines(minsp: float | None, y: Callable[[float], float]) -> list[str]:
    """Dashed lines at 1.0x (no change) and at the bar a speedup has to clear, labelled on the right."""
    pw = _W - _ML - _MR
    parts: list[str] = []
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
    return parts


def _step_line(points: Sequence[tuple[int, float | None]], x: Callable[[int], float], y: Callable[[float], float], colour: str,
               attrs: str = "") -> list[str]:
    """Best-so-far as a step line: it holds its value until an evaluation beats it (None: nothing yet)."""
    pts: list[str] = []
    prev: float | None = None
    for i, b in points:
        if b is None:
            continue
        if prev is not None and b != prev:
            pts.append(f"{x(i):.1f},{y(prev):.1f}")
        pts.append(f"{x(i):.1f},{y(b):.1f}")
        prev = b
    parts: list[str] = []
    if pts:
        if len(pts) == 1:
            parts.append(f'<circle cx="{pts[0].split(",")[0]}" cy="{pts[0].split(",")[1]}" r="2" fill="{colour}"/>')
        parts.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-width="2"{attrs}/>')
    return parts


def trajectory_svg(trajectory: Sequence[Evaluation], min_speedup: float | None, title: str = "") -> str:
    """Best-so-far speedup against evaluation index, with each evaluation's own result as a dot.

    Dashed lines mark 1.0x (no change) and the run's minimum speedup, so it shows at a glance
    whether and when the search crossed the bar. Failed evaluations without a speedup sit on the x axis.
    """
    n = len(trajectory)
    if n == 0:
        return '<p class="empty">no evaluations</p>'
    speedups = [f.finite(e.speedup) for e in trajectory]
    # drawn from the verdicts, by the rule show and the curves use (over rows as dicts, as the
    # store's nodes are): only a faster node is best
    best = [b for _, b in best_so_far_curve(e.to_json() for e in trajectory)]
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
    parts += _axes(n, ymax, step, x, y, "evaluation")
    parts += _ref_lines(minsp, y)
    parts += _step_line(list(enumerate(best, start=1)), x, y, _LINE)
    # one dot per evaluation, coloured by whether the candidate was correct
    for i, (e, s) in enumerate(zip(trajectory, speedups), start=1):
        status = _status(e)
        ok = status in f.CORRECT_STATUSES
        cy = y(s) if s is not None else _MT + ph
        tip = f"#{i} {status}, speedup {f.fmt_ratio(s)}, origin {_origin(e)}, hash {str(e.hash or '-')[:12]}"
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


# Node colours in the search tree, one per verdict; failures in warm colours, a reply without code in grey.
STATUS_COLOURS: dict[str, str] = {
    "faster": "#1a7f37",
    "not_faster": "#bf8700",
    "wrong": "#cf222e",
    "compile_error": "#fb8500",
    "runtime_error": "#8250df",
    "crash": "#6639ba",
    "timeout": "#c297ff",
    "rejected": "#82071e",
    "format": "#8c959f",
}
_CURVE_COLOURS = ("#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#1b7c83", "#9a6700", "#57606a")


def _status(e: Evaluation) -> str:
    return str(e.status) if e.given("status") else "?"


def _origin(e: Evaluation) -> str:
    return str(e.origin) if e.given("origin") else "?"


def _best_index(trajectory: Sequence[Evaluation], best: object) -> int | None:
    """Position of the report's best candidate in the trajectory (its best ``faster`` evaluation),
    else of the best ``faster`` evaluation; None when nothing was ``faster``: a merely correct
    candidate is never ringed as best."""
    faster = [(i, key) for i, e in enumerate(trajectory) if (key := best_key(e.to_json())) is not None]
    if isinstance(best, Mapping) and best.get("hash"):
        same = [(i, k) for i, k in faster if trajectory[i].hash == best["hash"]]
        faster = same or faster
    if not faster:
        return None
    return max(faster, key=lambda c: (c[1], -c[0]))[0]


def has_tree(trajectory: Sequence[Evaluation]) -> bool:
    """Whether the trajectory says who descends from whom (reports before search trees do not)."""
    return any(e.given("parent") or e.given("depth") for e in trajectory)


@dataclass
class _TreeLayout:
    """Where each evaluation of a trajectory sits in the tree: parent, depth, horizontal slot."""

    par: list[int | None]
    children: list[list[int]]
    depth: list[int]
    order: list[int]  # depth first from the roots: a parent before its children
    xslot: list[float]
    leaves: int

    @property
    def roots(self) -> list[int]:
        return [k for k in self.order if self.par[k] is None]


def _tree_layout(trajectory: Sequence[Evaluation]) -> _TreeLayout:
    """Depths from the structure, leaves numbered left to right, each parent centred over its children."""
    n = len(trajectory)
    pos_of = {e.index: k for k, e in enumerate(trajectory) if e.given("index") and isinstance(e.index, int)}
    par: list[int | None] = []
    for k, e in enumerate(trajectory):
        p = pos_of.get(e.parent) if e.parent is not None else None
        par.append(None if p == k else p)
    children: list[list[int]] = [[] for _ in range(n)]
    for k, p in enumerate(par):
        if p is not None:
            children[p].append(k)
    depth = [0] * n
    order: list[int] = []
    seen: set[int] = set()
    stack = [(k, 0) for k in reversed(range(n)) if par[k] is None]
    while stack:
        k, d = stack.pop()
        seen.add(k)
        depth[k] = d
        order.append(k)
        stack.extend((c, d + 1) for c in reversed(children[k]))
    for k in range(n):  # a parent cycle in a broken report: draw those evaluations as roots
        if k not in seen:
            par[k], children[k], depth[k] = None, [], 0
            order.append(k)
            seen.add(k)
    xslot = [0.0] * n
    leaves = 0
    for k in order:
        if not children[k]:
            xslot[k] = leaves
            leaves += 1
    for k in reversed(order):  # children come after their parent in ``order``: centre parents last
        if children[k]:
            xslot[k] = (xslot[children[k][0]] + xslot[children[k][-1]]) / 2
    return _TreeLayout(par, children, depth, order, xslot, leaves)


def _tree_legend(trajectory: Sequence[Evaluation], with_best: bool, left: float, width: int) -> list[tuple[str, float, int]]:
    """The verdicts present in the usual order, then the best ring, wrapped to the width:
    (status, or "" for the best ring; x; legend row)."""
    present = [st for st in STATUS_COLOURS if any(e.status == st for e in trajectory)]
    present += sorted({str(e.status if e.given("status") else None) for e in trajectory} - set(STATUS_COLOURS))
    legend: list[tuple[str, float, int]] = []
    lx, lrow = float(left), 0
    for st in present + ([""] if with_best else []):
        w = 18 + 7 * len(st or "best")
        if lx + w > width - 8 and lx > left:
            lx, lrow = float(left), lrow + 1
        legend.append((st, lx, lrow))
        lx += w
    return legend


def _tree_dot(e: Evaluation, k: int, best: bool, cx: float, cy: float, r: float) -> str:
    """One evaluation's dot, with its verdict, speedup, reward, origin and step on hover."""
    status = _status(e)
    speed = f.finite(e.speedup)
    reward = f.finite(e.reward)
    tip = (
        f"#{e.index if e.given('index') else k}"
        + (f" (node {e.node})" if e.node is not None else "")
        + f" {status}, speedup {f.fmt_ratio(speed)}, reward {'-' if reward is None else f'{reward:.3g}'}, "
        f"origin {_origin(e)}, step {e.step if e.given('step') else '-'}"
        + (f", strategy {e.strategy}" if e.strategy else "")
    )
    reasons = e.reasons
    if isinstance(reasons, Sequence) and not isinstance(reasons, str) and reasons:
        tip += f": {reasons[0]}"
    if best:
        tip += " (best)"
    ring = ' stroke="#0969da" stroke-width="3" data-best="1"' if best else ' stroke="#ffffff" stroke-width="1"'
    return (
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r + 2 if best else r:.1f}" fill="{STATUS_COLOURS.get(status, "#59636e")}"'
        f'{ring} data-status="{esc(status)}"><title>{esc(tip)}</title></circle>'
    )


def _best_label(e: Evaluation, best: object, speedup: object, cx: float, cy: float, r: float) -> str:
    """The best dot's label: the report's figure when the dot is the report's best candidate."""
    same = isinstance(best, Mapping) and best.get("hash") and e.hash == best["hash"]
    quoted = speedup if same and f.finite(speedup) is not None else e.speedup
    return (
        f'<text x="{cx + r + 5:.1f}" y="{cy + 4:.1f}" style="fill:#0969da;font-weight:600">'
        f"best {esc(f.fmt_ratio(quoted))}</text>"
    )


def _tree_legend_svg(legend: Sequence[tuple[str, float, int]], top: float) -> list[str]:
    parts: list[str] = []
    for st, lx, lrow in legend:
        ly = top + 16 * lrow
        if st:
            parts.append(f'<circle cx="{lx:.0f}" cy="{ly:.0f}" r="4" fill="{STATUS_COLOURS.get(st, "#59636e")}"/>')
            parts.append(f'<text x="{lx + 7:.0f}" y="{ly + 4:.0f}">{esc(st)}</text>')
        else:
            parts.append(f'<circle cx="{lx:.0f}" cy="{ly:.0f}" r="5" fill="#ffffff" stroke="#0969da" stroke-width="3"/>')
            parts.append(f'<text x="{lx + 9:.0f}" y="{ly + 4:.0f}">best</text>')
    return parts


def tree_svg(trajectory: Sequence[Evaluation], best: object = None, title: str = "", speedup: object = None) -> str:
    """The search tree: the reference on top, each evaluation a dot under the one it improved or fixed.

    Dots are coloured by verdict, the best candidate ringed and labelled (with ``speedup``, the
    report's figure, when the ring is on the report's best candidate); hovering a dot shows its
    verdict, speedup, reward, origin and step. Leaves are spread left to right in the order the
    search made them, each parent centred over its children; a wide tree widens the picture.
    """
    if not trajectory:
        return '<p class="empty">no evaluations</p>'
    t = _tree_layout(trajectory)
    roots = t.roots
    levels = max(t.depth) + 2  # the reference's row, then depths 0..max
    ml, mr, mt = 64, 72, 20
    gap = min(36.0, max(10.0, (_W - ml - mr) / max(t.leaves, 1)))
    width = max(_W, int(ml + mr + gap * max(t.leaves - 1, 0)) + 1)
    row = min(56.0, max(18.0, 420 / max(levels - 1, 1)))
    top = _best_index(trajectory, best)
    legend = _tree_legend(trajectory, top is not None, ml, width)
    plot_bottom = mt + row * (levels - 1)
    height = int(plot_bottom + 30 + 16 * (legend[-1][2] + 1 if legend else 1)) + 1
    span = gap * max(t.leaves - 1, 0)
    x0 = ml + ((width - ml - mr) - span) / 2
    r = min(7.0, max(3.0, gap * 0.3))

    def xy(k: int) -> tuple[float, float]:
        return x0 + t.xslot[k] * gap, mt + row * (t.depth[k] + 1)

    ref_x = (x0 + (min(t.xslot[k] for k in roots) + max(t.xslot[k] for k in roots)) / 2 * gap) if roots else x0
    ref_y = float(mt)
    label = title or "search tree"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="search-tree" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}">',
        f"<title>{esc(label)}</title>",
    ]
    # depth labels on the left, thinned to about 12
    every = max(1, math.ceil((levels - 1) / 12))
    parts.append(f'<text x="8" y="{ref_y + 4:.1f}">reference</text>')
    for d in range(0, levels - 1, every):
        parts.append(f'<text x="8" y="{mt + row * (d + 1) + 4:.1f}" style="fill:#59636e">depth {d}</text>')
    for k in t.order:  # edges under the dots
        x1, y1 = xy(k)
        parent = t.par[k]
        px, py = xy(parent) if parent is not None else (ref_x, ref_y)
        parts.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" stroke="#afb8c1" stroke-width="1"/>')
    parts.append(
        f'<rect x="{ref_x - 5:.1f}" y="{ref_y - 5:.1f}" width="10" height="10" fill="#59636e">'
        f"<title>the reference: every root starts from it</title></rect>"
    )
    parts += [_tree_dot(trajectory[k], k, k == top, *xy(k), r) for k in t.order]
    if top is not None:
        parts.append(_best_label(trajectory[top], best, speedup, *xy(top), r))
    parts += _tree_legend_svg(legend, plot_bottom + 30)
    parts.append("</svg>")
    return "\n".join(parts)


def curves_svg(curves: Mapping[str, object], min_speedup: float | None, title: str = "") -> str:
    """Best-so-far speedup against evaluations, one step line per strategy (per run when a strategy
    ran more than once), so searches of different kinds compare on the same budget axis."""
    series: list[tuple[str, list[tuple[int, float | None]]]] = []
    for label, curve in curves.items():
        pts: list[tuple[int, float | None]] = []
        if isinstance(curve, Sequence) and not isinstance(curve, str):
            for p in curve:
                if isinstance(p, Sequence) and not isinstance(p, str) and len(p) == 2 and f.finite(p[0]) is not None:
                    pts.append((int(f.finite(p[0]) or 0), f.finite(p[1])))
        series.append((str(label), pts))
    n = max((i for _, pts in series for i, _ in pts), default=0)
    if not series or n == 0:
        return '<p class="empty">no evaluations</p>'
    minsp = f.finite(min_speedup)
    values = [v for _, pts in series for _, v in pts if v is not None] + [1.0] + ([minsp] if minsp is not None else [])
    step = _nice_step(max(values) * 1.05)
    ymax = step * math.ceil(max(values) * 1.05 / step)
    pw, ph = _W - _ML - _MR, _H - _MT - _MB
    height = _H + 16 * len(series) + 4

    def x(i: float) -> float:
        return _ML + (pw / 2 if n == 1 else (i - 1) * pw / (n - 1))

    def y(v: float) -> float:
        return _MT + ph - (v / ymax) * ph

    label = title or "best-so-far speedup by strategy"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="curves" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
        f'role="img" aria-label="{esc(label)}">',
        f"<title>{esc(label)}</title>",
        f'<rect x="{_ML}" y="{_MT}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#d0d7de"/>',
    ]
    parts += _axes(n, ymax, step, x, y, "evaluations")
    parts += _ref_lines(minsp, y)
    for j, (name, pts) in enumerate(series):
        colour = _CURVE_COLOURS[j % len(_CURVE_COLOURS)]
        dash = ' stroke-dasharray="7 3"' if j >= len(_CURVE_COLOURS) else ""
        line = _step_line(pts, x, y, colour, f'{dash} data-curve="{esc(name)}"')
        if not line:  # nothing correct yet: still one element per curve, so every strategy is accounted for
            line = [f'<polyline points="" fill="none" stroke="{colour}" data-curve="{esc(name)}"/>']
        parts += line
        final = next((v for _, v in reversed(pts) if v is not None), None)
        last = pts[-1][0] if pts else 0
        if final is not None:
            first = next(i for i, v in pts if v == final)
            note = f"best {final:.2f}x at evaluation {first} of {last}"
        else:
            note = f"no correct candidate in {last} evaluations"
        ly = _H + 16 * j + 2
        parts.append(f'<line x1="{_ML}" y1="{ly}" x2="{_ML + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{_ML + 24}" y="{ly + 4}">{esc(name)}: {esc(note)}</text>')
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
    out += _search_figures(t, min_speedup)
    out += _workloads_table(rows_of(WorkloadResult, t.get("workloads")))
    out += _benchmarks_table(rows_of(BenchmarkResult, t.get("benchmarks")))
    out.append("</section>")
    return "\n".join(out)


def _search_figures(t: Mapping[str, JSON], min_speedup: float | None) -> list[str]:
    """The trajectory, the tree (when the search branched) and the per-strategy curves."""
    out = ["<h3>Search trajectory</h3>"]
    trajectory = rows_of(Evaluation, t.get("trajectory"))
    out.append(trajectory_svg(trajectory, min_speedup, title=f"{t.get('id', '?')}: best-so-far speedup"))
    if trajectory and has_tree(trajectory):
        out.append("<h3>Search tree</h3>")
        tree = tree_svg(trajectory, t.get("best"), title=f"{t.get('id', '?')}: search tree", speedup=t.get("speedup"))
        out.append(f'<div class="scroll">{tree}</div>')
    search = row_of(SearchSummary, t.get("search"))
    curves = search.curves if search is not None else None
    if isinstance(curves, Mapping) and curves:
        out.append("<h3>Best so far by strategy</h3>")
        out.append(curves_svg(curves, min_speedup, title=f"{t.get('id', '?')}: best-so-far speedup by strategy"))
    return out


def _workloads_table(workloads: Sequence[WorkloadResult]) -> list[str]:
    if not workloads:
        return []
    rows = [f.workload_cells(w) for w in workloads]
    return ["<h3>Workloads</h3>", _table(f.WORKLOAD_HEADER, rows, numeric=(2, 3, 4, 5))]


def _benchmarks_table(benchmarks: Sequence[BenchmarkResult]) -> list[str]:
    """pytest-benchmark's numbers for the reference and the applied kernel, side by side."""
    if not benchmarks:
        return []
    rows = []
    for b in benchmarks:
        r, c = b.reference or Timing(), b.candidate or Timing()
        rows.append(
            (
                str(b.name) if b.given("name") else "?",
                f.fmt_time(r.median_s),
                f.fmt_time(c.median_s),
                f"{f.fmt_time(r.mean_s)} ± {f.fmt_time(r.stddev_s)}",
                f"{f.fmt_time(c.mean_s)} ± {f.fmt_time(c.stddev_s)}",
                f"{'-' if r.rounds is None else r.rounds} / {'-' if c.rounds is None else c.rounds}",
                f.fmt_speedup(b.speedup, b.speedup_ci),
            )
        )
    header = (
        "benchmark",
        "reference median",
        "candidate median",
        "reference mean ± sd",
        "candidate mean ± sd",
        "rounds (ref / cand)",
        "speedup",
    )
    return ["<h3>Benchmarks</h3>", _table(header, rows, numeric=(1, 2, 3, 4, 5, 6))]


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
        body += [f'<p class="no_speedup">{esc(warning)}</p>' for warning in f.warning_lines(report)]
        body += [f'<p class="meta">{esc(line)}</p>' for t in targets for line in f.measurement_lines(t)]
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
