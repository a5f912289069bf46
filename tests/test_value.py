"""Reward-to-go: labels on hand-built trees, and a light model that beats the no-model
baseline on synthetic trees where the code's techniques decide the outcome."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.model.search import NodeRow
from pytest_maxcode.store import Store
from pytest_maxcode.value import reward_to_go
from pytest_maxcode.value.features import FEATURE_NAMES, code_features


def n(i: int, parent: int | None, reward: float) -> dict:
    return {"id": i, "parent_id": parent, "reward": reward}


def test_labels_are_the_best_discounted_reward_below_not_the_sum() -> None:
    #      1 (-0.75)
    #     /        \
    #   2 (1.2)    3 (-0.25)
    #   |            |
    #   4 (3.0)      5 (-1)
    nodes = [n(1, None, -0.75), n(2, 1, 1.2), n(3, 1, -0.25), n(4, 2, 3.0), n(5, 3, -1.0)]
    labels = reward_to_go(nodes, gamma=0.5)
    assert labels[4] == 3.0 and labels[5] == -1.0
    assert labels[2] == pytest.approx(1.5)  # max(1.2, 0.5 * 3.0)
    assert labels[3] == pytest.approx(-0.25)  # its own reward beats 0.5 * -1
    assert labels[1] == pytest.approx(0.75)  # max(-0.75, 0.5 * 1.5): the best path, discounted twice
    assert reward_to_go(nodes, gamma=1.0)[1] == 3.0  # no discount: the best reward below


def test_a_bad_discount_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        reward_to_go([n(1, None, 1.0)], gamma=0)


def test_code_features_name_the_techniques() -> None:
    f = code_features("#pragma omp parallel for\nfor (int i = 0; i < n; ++i) {\n#pragma omp simd\n for (;;) {} }")
    assert f["code_threads"] == 1 and f["code_vectorized"] == 1 and f["code_shared_memory"] == 0 and f["code_loops"] == 2
    assert len(FEATURE_NAMES) == len(set(FEATURE_NAMES))


KERNEL = 'extern "C" int maxcode_run(const DLTensor* in, int32_t ni, DLTensor* out, int32_t no, void* s) {{\n{body}\n  return 0;\n}}\n'
PARTS = {"threads": "#pragma omp parallel for", "vectorized": "#pragma omp simd", "tiling": "const int TILE = 64;", "unrolled": "#pragma GCC unroll 4"}


def synthetic_store(path: Path, n_trees: int = 40, seed: int = 1) -> None:
    """Trees whose rewards follow from the techniques in the code: threads and vectorized
    access pay off, tiling a little, unrolling not at all; each tree's roots differ."""
    rng = random.Random(seed)
    with Store(path) as store:
        for t in range(n_trees):
            run = store.begin_run("synthetic", "0")
            store.upsert_target("lib.k", "function", "lib.py", "x")

            def add(parent: tuple[int, set[str]] | None, step: int) -> tuple[int, set[str]]:
                base = set(parent[1]) if parent else set()
                used = base | {p for p in PARTS if rng.random() < 0.35}
                reward = 1.0 + 1.5 * ("threads" in used) + 1.0 * ("vectorized" in used) + 0.3 * ("tiling" in used) + rng.gauss(0, 0.05)
                body = "\n".join(PARTS[p] for p in sorted(used)) + f"\n  for (int i = 0; i < {rng.randint(1, 99)}; ++i) {{}}"
                code = KERNEL.format(body=body)
                h = hashlib.sha256(code.encode()).hexdigest()
                store.add_candidate(h, "native", "cpp", code, "synthetic")
                node_id = store.add_node(NodeRow(run_id=run, target_id="lib.k", parent_id=parent[0] if parent else None, strategy="beam",
                                         policy="synthetic", step=step, depth=step, origin="synthetic", candidate_hash=h,
                                         status="faster", reward=reward, speedup=reward, candidate_s=1e-3 / reward, reasons=[], llm_call_id=None))
                return node_id, used

            roots = [add(None, 0) for _ in range(3)]
            for r in roots:
                for child in [add(r, 1) for _ in range(2)]:
                    add(child, 2)
            store.finish_run(run)


def maxcode(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_a_trained_model_beats_the_no_model_baseline_on_held_out_trees(tmp_path: Path) -> None:
    (tmp_path / ".maxcode").mkdir()
    synthetic_store(tmp_path / ".maxcode" / "maxcode.db")
    r = maxcode("value", "eval", "--json", "--seed", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    m, b = result["model"], result["baseline"]
    assert result["trees"]["test"] >= 10 and result["sibling_groups"] >= 30
    assert m["top1"] > b["top1"] + 0.2, result
    assert m["spearman_all"] > 0.6 and m["spearman_all"] > (b["spearman_all"] or 0) + 0.3, result
    assert m["spearman_siblings"] > (b["spearman_siblings"] or 0), result
    train = maxcode("value", "train", cwd=tmp_path)
    assert train.returncode == 0 and (tmp_path / ".maxcode" / "value" / "model.pkl").is_file(), train.stderr
    meta = json.loads((tmp_path / ".maxcode" / "value" / "model.json").read_text())
    assert meta["trees"] == 40 and meta["features"] == FEATURE_NAMES
    export = maxcode("value", "export", "--gamma", "0.8", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    pairs = [json.loads(line) for line in (tmp_path / ".maxcode" / "value" / "rtg.jsonl").read_text().splitlines()]
    assert len(pairs) == 40 * 15 and all("maxcode_run" in p["prompt"] and float(p["answer"]) == pytest.approx(p["label"], rel=1e-3) for p in pairs)


def test_value_commands_fail_in_one_line(tmp_path: Path) -> None:
    r = maxcode("value", "train", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "run pytest --maxcode first" in r.stderr
    (tmp_path / ".maxcode").mkdir()
    with Store(tmp_path / ".maxcode" / "maxcode.db"):
        pass
    r = maxcode("value", "eval", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "at least 2" in r.stderr
    r = maxcode("value", "train", "--gamma", "1.5", cwd=tmp_path)
    assert r.returncode == 2 and "(0, 1]" in r.stderr


def test_reranking_sends_only_the_top_m_by_predicted_reward_to_go(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.check import CandidateSpec
    from pytest_maxcode.oracle.verdict import Verdict
    from pytest_maxcode.search.state import Proposal, SearchState
    from pytest_maxcode.search.strategies.maxcode import MaxcodeStrategy
    from pytest_maxcode.search.strategy import StrategyParams
    from pytest_maxcode.store import Store as _Store
    from pytest_maxcode.value import model as vm
    from pytest_maxcode.value.scorer import LightScorer

    synthetic_store(tmp_path / "maxcode.db")
    with _Store(tmp_path / "maxcode.db") as store:
        rows = vm.load_rows(store, 0.9)
    vm.save(vm.fit(rows), tmp_path / "value", gamma=0.9, rows=rows)

    def spec(parts: list[str]) -> CandidateSpec:
        code = KERNEL.format(body="\n".join(PARTS[p] for p in parts))
        return CandidateSpec(tmp_path / f"{'-'.join(parts) or 'plain'}.cpp", "native", "cpp", code)

    offered = [[], ["unrolled"], ["threads", "vectorized"], ["tiling"], ["threads"], None]  # None: a reply without code

    class Proposer:
        name = "test"

        def __init__(self) -> None:
            self.asked = 0

        def propose(self, state, asks):
            self.asked += len(asks)
            return [Proposal(spec(parts), "test", parent=a.parent) if parts is not None else Proposal(None, "test", error="no code")
                    for a, parts in zip(asks, offered)]

    state = SearchState("t")
    state.add(Proposal(spec([]), "test"), Verdict("p", "not_faster", speedup=1.0, candidate_s=1e-3), 0)
    proposer = Proposer()
    strategy = MaxcodeStrategy(rerank=LightScorer(tmp_path / "value", top=2))
    strategy.initialize(state, proposer, StrategyParams(k=6))
    sent = strategy.propose(10)
    assert proposer.asked == 6 and len(sent) == 2  # k asked, only the top m sent
    assert [p.spec.path.stem for p in sent] == ["threads-vectorized", "threads"]


def test_rerank_without_a_trained_model_is_one_usage_line(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text("import pytest_maxcode as maxcode\n\n\n@maxcode.optimize\ndef f(x):\n    return x\n")
    (tmp_path / "test_lib.py").write_text("from lib import f\n\n\ndef test_f():\n    assert f(1) == 1\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", "--maxcode-rerank=light", "--maxcode-strategy=maxcode"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 4 and "maxcode value train" in r.stdout + r.stderr and "Traceback" not in r.stdout + r.stderr
