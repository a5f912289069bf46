"""Labels: each node's best discounted reward on any path from it down.

label(n) = max(reward(n), gamma * max(label(c) for c in children(n))): the max-reward
objective, not a sum, so one great descendant makes an ancestor valuable however many
failures sit beside it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any


def reward_to_go(nodes: Iterable[Mapping[str, Any]], gamma: float = 0.9) -> dict[int, float]:
    """Labels for every node (keyed by ``id``); a node's parent must be in ``nodes`` to count."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"the discount must be in (0, 1], not {gamma}")
    nodes = list(nodes)
    children: dict[int, list[int]] = defaultdict(list)
    ids = {int(n["id"]) for n in nodes}
    for n in nodes:
        if n.get("parent_id") is not None and int(n["parent_id"]) in ids:
            children[int(n["parent_id"])].append(int(n["id"]))
    reward = {int(n["id"]): float(n["reward"]) for n in nodes}
    label: dict[int, float] = {}
    # children always have larger ids than their parents (they are evaluated later)
    for node_id in sorted(ids, reverse=True):
        below = [label[c] for c in children.get(node_id, [])]
        label[node_id] = max([reward[node_id]] + [gamma * b for b in below])
    return label


def trees(nodes: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, str], list[Mapping[str, Any]]]:
    """A store's nodes grouped into search trees: one per (run, target)."""
    out: dict[tuple[Any, str], list[Mapping[str, Any]]] = defaultdict(list)
    for n in nodes:
        out[(n.get("run_id"), str(n["target_id"]))].append(n)
    return dict(out)
