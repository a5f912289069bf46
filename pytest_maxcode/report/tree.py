"""Search trees read back from the store: structure, best-so-far curves, a terminal view.

Everything here is a pure function over node dicts exactly as ``Store.nodes`` returns them
(keys ``id``, ``run_id``, ``parent_id``, ``strategy``, ``policy``, ``step``, ``depth``,
``origin``, ``candidate_hash``, ``status``, ``reward``, ``speedup``, ``candidate_s``,
``reasons``, ``llm_call_id``, ...), so ``maxcode show`` and the report agree on what a
tree, a best node and a curve are.

Evaluation indices in curves are 1-based and count every node in id order, format
failures included: each node is one attempt the search paid for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._styles import STATUS_STYLE, terminal_safe
from ..model.jsontypes import JSON

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CORRECT",
    "best_key",
    "best_node",
    "best_so_far_curve",
    "build_tree",
    "curve_label",
    "curves_by_strategy",
    "node_interval",
    "node_line",
    "render_tree",
]

CORRECT = ("faster", "not_faster")

#: a node, as the store or a report's trajectory gives it: what the functions that pick nodes hand back
N = TypeVar("N", bound=Mapping[str, JSON])

# The terminal colours of _styles.STATUS_STYLE, plus the one status only a tree has.
_FORMAT_STYLE = "magenta"


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _ordered(nodes: Iterable[N]) -> list[N]:
    return sorted(nodes, key=lambda n: (n.get("id") is None, n.get("id") or 0))


def best_key(node: Mapping[str, JSON]) -> tuple[float, float] | None:
    """How a ``faster`` node ranks against the others (None for any other status): the lowest own
    time first (every evaluation times the reference in its own process, so a candidate's own
    median is what compares across evaluations), then the highest speedup where no time was kept.

    Only ``faster`` counts: a ``not_faster`` node's point estimate is what its interval failed
    to confirm (8.92x inside [0.54, 11.4] is no speedup), and a failed node's timing means nothing.
    A ``faster`` node's speedup is its confirmed one: the oracle's second measurement.
    """
    if node.get("status") != "faster":
        return None
    own = _num(node.get("candidate_s"))
    return (-own if own else float("-inf"), _num(node.get("speedup")) or 0.0)


def build_tree(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The forest: copies of the nodes, each with ``children`` (oldest first); the roots, oldest first.

    A node whose parent is not among ``nodes`` (another run's, or filtered out) is a root.
    """
    copies = [dict(n, children=[]) for n in _ordered(nodes)]
    by_id = {c["id"]: c for c in copies if c.get("id") is not None}
    roots: list[dict[str, Any]] = []
    for c in copies:
        parent = by_id.get(c.get("parent_id")) if c.get("parent_id") is not None else None
        if parent is None or parent is c:
            roots.append(c)
        else:
            parent["children"].append(c)
    return roots


def best_so_far_curve(nodes: Iterable[Mapping[str, JSON]]) -> list[list[float | None]]:
    """``[[i, best], ...]``: after the i-th evaluation (1-based, id order), the confirmed speedup
    of :func:`best_node` among the first i, or None while none was ``faster``.

    The curve ends on the number ``maxcode show`` and the report quote for the same nodes.
    """
    out: list[list[float | None]] = []
    best: tuple[float, float] | None = None
    value: float | None = None
    for i, n in enumerate(_ordered(nodes), start=1):
        key = best_key(n)
        if key is not None and (best is None or key > best):
            best, value = key, _num(n.get("speedup"))
        out.append([i, value])
    return out


def curve_label(strategy: str, run_id: object, shared: bool) -> str:
    """``beam``, or ``beam (run 3)`` when several runs used the same strategy."""
    if not shared:
        return strategy
    return f"{strategy} (run {run_id})" if run_id is not None else f"{strategy} (no run)"


def curves_by_strategy(nodes: Iterable[Mapping[str, JSON]]) -> dict[str, list[list[float | None]]]:
    """One best-so-far curve per (run, strategy), keyed by the strategy's name.

    Give it one target's nodes across runs (``Store.nodes(target_id)``). Each run's search
    starts its own curve at evaluation 1. When several runs used the same strategy, their
    keys become ``"<strategy> (run <run_id>)"``; otherwise the key is the strategy alone.
    Keys are in the order the runs started (their first node's id).
    """
    groups: dict[tuple[JSON, str], list[Mapping[str, JSON]]] = {}
    for n in _ordered(nodes):
        groups.setdefault((n.get("run_id"), str(n.get("strategy") or "?")), []).append(n)
    runs_per_strategy: dict[str, int] = {}
    for _, strategy in groups:
        runs_per_strategy[strategy] = runs_per_strategy.get(strategy, 0) + 1
    return {
        curve_label(strategy, run_id, runs_per_strategy[strategy] > 1): best_so_far_curve(group)
        for (run_id, strategy), group in groups.items()
    }


def best_node(nodes: Iterable[N]) -> N | None:
    """The node a search keeps: among the ``faster`` ones, the lowest own time (see
    :func:`best_key`). None when no node was ``faster``: a merely correct node is never best."""
    best: N | None = None
    top: tuple[float, float] | None = None
    for n in _ordered(nodes):
        key = best_key(n)
        if key is not None and (top is None or key > top):
            best, top = n, key
    return best


def node_interval(node: Mapping[str, JSON]) -> tuple[float, float] | None:
    """The node's 95% interval where the nodes carry one (``speedup_ci``, or ``ci_low``/``ci_high``)."""
    ci = node.get("speedup_ci")
    lo, hi = (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (node.get("ci_low"), node.get("ci_high"))
    lo, hi = _num(lo), _num(hi)
    return (lo, hi) if lo is not None and hi is not None else None


def _fmt_cost(cost: float | None) -> str:
    if cost is None:
        return "-"
    if cost == 0:
        return "$0"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def _fmt_reward(r: object) -> str:
    v = _num(r)
    return "-" if v is None else f"{v:.3g}"


def _first_reason(node: Mapping[str, Any], width: int = 100) -> str:
    reasons = node.get("reasons") or []
    if not reasons:
        return ""
    text = " ".join(str(reasons[0]).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def node_line(node: Mapping[str, Any], llm_costs: Mapping[int, float], *, best: bool = False):
    """One node as a rich ``Text`` for a terminal (never markup, controls escaped: origins,
    reasons and critiques are untrusted text)."""
    # here, not at the top: keeps start-up fast (the plugin imports the report)
    from rich.text import Text

    status = str(node.get("status", "?"))
    parent = node.get("parent_id")
    call = node.get("llm_call_id")
    cost = llm_costs.get(call, 0.0) if call is not None else None
    speedup = _num(node.get("speedup"))
    line = Text()
    line.append(f"#{node.get('id')}", style="bold")
    line.append(f"  {'parent #' + str(parent) if parent is not None else 'root'}", style="dim")
    line.append(f"  step {node.get('step', '?')}  ")
    line.append(terminal_safe(status), style=STATUS_STYLE.get(status, _FORMAT_STYLE if status == "format" else ""))
    line.append(f"  {'-' if speedup is None else f'{speedup:.2f}x'}")
    ci = node_interval(node) if speedup is not None else None
    if ci is not None:
        line.append(f" [{ci[0]:.2f}, {ci[1]:.2f}]")
    line.append(f"  reward {_fmt_reward(node.get('reward'))}")
    line.append(f"  {_fmt_cost(cost)}")
    line.append(terminal_safe(f"  {node.get('origin', '?')}"), style="cyan")
    if best:
        line.append("  <- best", style="bold green")
    reason = _first_reason(node)
    if reason:
        line.append(terminal_safe(f"  {reason}"), style="dim")
    if node.get("critique"):
        critic = node.get("critic")
        who = f" ({critic})" if critic and critic != "rules" else ""
        line.append(terminal_safe(f"\n    critique{who}: {' '.join(str(node['critique']).split())}"), style="italic")
    if node.get("critique_flags"):
        flags = ", ".join(map(str, node["critique_flags"]))
        line.append(terminal_safe(f"\n    flagged: the critique cites what the oracle did not measure: {flags}"), style="bold red")
    return line


def _header(run_nodes: Sequence[Mapping[str, JSON]]) -> str:
    first = run_nodes[0]
    run = first.get("run_id")
    strategies = sorted({str(n.get("strategy", "?")) for n in run_nodes})
    policies = sorted({str(n.get("policy", "?")) for n in run_nodes})
    return (
        f"{first.get('target_id', '?')}: run {run if run is not None else '-'}, "
        f"strategy {', '.join(strategies)}, policy {', '.join(policies)}, {len(run_nodes)} node(s)"
    )


def render_tree(nodes: Sequence[Mapping[str, JSON]], console: Console, llm_costs: Mapping[int, float]) -> None:
    """Print each run's search tree: one line per node (see :func:`node_line`), children
    indented under their parent, the run's best node marked ``<- best``.

    ``llm_costs`` maps an LLM call id to its cost in dollars (a node without a call shows ``-``).
    """
    # rich is imported when a tree is drawn, not with the plugin: keeps start-up fast
    from rich.text import Text
    from rich.tree import Tree

    if not nodes:
        console.print(Text("no nodes", style="dim"))
        return
    by_run: dict[JSON, list[Mapping[str, JSON]]] = {}
    for n in _ordered(nodes):
        by_run.setdefault(n.get("run_id"), []).append(n)
    for run_nodes in by_run.values():
        top = best_node(run_nodes)
        best_id = top.get("id") if top is not None else None
        tree = Tree(Text(terminal_safe(_header(run_nodes)), style="bold"), guide_style="dim")

        stack: list[tuple[Tree, Mapping[str, Any]]] = [(tree, r) for r in reversed(build_tree(run_nodes))]
        while stack:  # depth-first, children oldest first; no recursion, however deep the search went
            branch, node = stack.pop()
            sub = branch.add(node_line(node, llm_costs, best=node.get("id") == best_id))
            stack.extend((sub, c) for c in reversed(node["children"]))
        console.print(tree)
