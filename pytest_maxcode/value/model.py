"""The light reward-to-go model: gradient-boosted trees on node features (scikit-learn, CPU).

Trained on every stored search tree, evaluated on held-out trees against the no-model
baseline (proposals taken in the order they were generated), saved under ``.maxcode/value/``.
"""

from __future__ import annotations

import json
import pickle
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .._extras import require
from ..errors import MaxcodeError
from ..store import Store
from .features import FEATURE_NAMES, node_features
from .labels import reward_to_go, trees

MODEL_FILE = "model.pkl"
META_FILE = "model.json"

#: a search tree's key: (run id, target id)
TreeKey = tuple[Any, str]


class Regressor(Protocol):
    """What the value model needs of scikit-learn's GradientBoostingRegressor."""

    def fit(self, x: list[list[float]], y: list[float]) -> Regressor: ...

    def predict(self, x: list[list[float]]) -> Sequence[float]: ...


@dataclass
class Row:
    node: dict[str, Any]
    tree: TreeKey
    features: list[float]
    label: float
    code: str | None
    lang: str | None
    parent: dict[str, Any] | None


def load_rows(store: Store, gamma: float) -> list[Row]:
    """Every stored node with its features and reward-to-go label."""
    rows: list[Row] = []
    all_nodes = [n for t in store.target_ids() for n in store.nodes(t)]
    for key, nodes in trees(all_nodes).items():
        labels = reward_to_go(nodes, gamma)
        by_id = {n["id"]: n for n in nodes}
        for n in nodes:
            cand = store.candidate(n["candidate_hash"]) if n.get("candidate_hash") else None
            code, lang = (cand["source"], cand["lang"]) if cand else (None, None)
            parent = by_id.get(n.get("parent_id"))
            rows.append(Row(n, key, node_features(n, code, parent, lang), labels[n["id"]], code, lang, parent))
    return rows


def _sklearn() -> Callable[..., Regressor]:
    return require("sklearn.ensemble", "the value model (maxcode value train, --maxcode-rerank=light)").GradientBoostingRegressor


def fit(rows: list[Row], seed: int = 0) -> Regressor:
    if len(rows) < 4:
        raise MaxcodeError(f"only {len(rows)} stored node(s): run more searches (pytest --maxcode) before training")
    model = _sklearn()(n_estimators=150, max_depth=3, learning_rate=0.1, subsample=0.9, random_state=seed)
    model.fit([r.features for r in rows], [r.label for r in rows])
    return model


def save(model: Regressor, out_dir: Path, *, gamma: float, rows: list[Row]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (MODEL_FILE + ".tmp")
    tmp.write_bytes(pickle.dumps({"model": model, "features": FEATURE_NAMES, "gamma": gamma}))
    tmp.replace(out_dir / MODEL_FILE)
    meta = {
        "features": FEATURE_NAMES, "gamma": gamma, "nodes": len(rows), "trees": len({r.tree for r in rows}),
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "GradientBoostingRegressor",
    }
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2))
    return out_dir / MODEL_FILE


def load(path: Path) -> tuple[Regressor, float]:
    if not path.is_file():
        raise MaxcodeError(f"{path}: no value model; train one with maxcode value train")
    _sklearn()  # unpickling the model needs it: say which extra, not a bare ModuleNotFoundError
    data = pickle.loads(path.read_bytes())  # our own file, written by save()
    if data.get("features") != FEATURE_NAMES:
        raise MaxcodeError(f"{path}: trained on other features; train it again with maxcode value train")
    return data["model"], float(data["gamma"])


def _spearman(a: list[float], b: list[float]) -> float | None:
    spearmanr = require("scipy.stats", "evaluating the value model").spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)


def sibling_groups(rows: list[Row]) -> list[list[Row]]:
    """Proposals that competed: the children of one parent (a tree's roots compete too)."""
    groups: dict[tuple[TreeKey, int | None], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.tree, r.node.get("parent_id")), []).append(r)
    return [g for g in groups.values() if len(g) >= 2 and len({x.label for x in g}) >= 2]


def evaluate(rows: list[Row], holdout: float = 0.3, seed: int = 0) -> dict[str, Any]:
    """Train on some trees, rank the held-out trees' nodes: the model against generation order."""
    keys = sorted({r.tree for r in rows}, key=str)
    if len(keys) < 2:
        raise MaxcodeError(f"{len(keys)} search tree(s) stored: evaluation holds whole trees out, so it needs at least 2")
    random.Random(seed).shuffle(keys)
    n_test = min(len(keys) - 1, max(1, round(holdout * len(keys))))
    test_keys = set(keys[:n_test])
    train = [r for r in rows if r.tree not in test_keys]
    test = [r for r in rows if r.tree in test_keys]
    model = fit(train, seed)
    pred = dict(zip((id(r) for r in test), model.predict([r.features for r in test])))
    groups = sibling_groups(test)

    def top1(score: Callable[[Row], float]) -> float | None:
        if not groups:
            return None
        hits = 0
        for g in groups:
            best_label = max(x.label for x in g)
            hits += max(g, key=score).label == best_label
        return hits / len(groups)

    def mean_spearman(score: Callable[[Row], float]) -> float | None:
        values = [s for g in groups if (s := _spearman([score(x) for x in g], [x.label for x in g])) is not None]
        return sum(values) / len(values) if values else None

    model_score = lambda x: pred[id(x)]
    baseline_score = lambda x: -int(x.node["id"])  # the first generated proposal first
    return {
        "trees": {"train": len(keys) - n_test, "test": n_test},
        "nodes": {"train": len(train), "test": len(test)},
        "sibling_groups": len(groups),
        "model": {
            "spearman_all": _spearman([pred[id(r)] for r in test], [r.label for r in test]),
            "spearman_siblings": mean_spearman(model_score),
            "top1": top1(model_score),
        },
        "baseline": {
            "name": "generation order",
            "spearman_all": _spearman([baseline_score(r) for r in test], [r.label for r in test]),
            "spearman_siblings": mean_spearman(baseline_score),
            "top1": top1(baseline_score),
        },
    }


def reward_prompt(target_id: str, depth: int, parent: dict[str, Any] | None, lang: str, code: str, gamma: float) -> str:
    """One node as a generative reward-to-go model sees it: in the exported training pairs and
    in the questions ``--maxcode-rerank=llm`` asks, so a model tuned on one answers the other."""
    context = (
        f"Parent: {parent['status']}, reward {parent['reward']:.3g}" + (f"; critique: {parent['critique']}" if parent.get("critique") else "")
        if parent else "Parent: the reference (a first attempt)"
    )
    return (
        f"Target {target_id}, depth {depth}. {context}\n"
        f"Predict the best speedup reachable from this {lang} candidate and its refinements "
        f"(discount {gamma} per step; failures score below 0).\n```{lang}\n{code.rstrip()}\n```"
    )


def export_jsonl(rows: list[Row], out: Path, gamma: float) -> int:
    """Prompt/answer pairs for fine-tuning a generative reward-to-go model."""
    n = 0
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w") as f:
        for r in rows:
            if r.code is None:
                continue
            prompt = reward_prompt(r.node["target_id"], r.node.get("depth", 0), r.parent, r.lang or "", r.code, gamma)
            f.write(json.dumps({"prompt": prompt, "answer": f"{r.label:.4g}", "label": r.label, "node": r.node["id"],
                                "target": r.node["target_id"], "run": r.node.get("run_id")}) + "\n")
            n += 1
    tmp.replace(out)
    return n
