"""The LoRA reward-to-go example's plain-Python half: it reads what ``maxcode value export``
writes, builds the chat the LLM scorer sends, and splits by search tree. Training itself
needs a GPU and the Hugging Face stack, so it is not run here."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_maxcode.value.model import Row, export_jsonl, reward_prompt
from pytest_maxcode.value.scorer import SYSTEM

SCRIPT = Path(__file__).parent.parent / "examples" / "reward_to_go_lora" / "train_lora.py"
GAMMA = 0.9

# runs the script in a fresh interpreter where the training stack cannot be imported, even if installed
WITHOUT_STACK = """
import runpy, sys
class _Gone:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"trl", "peft", "transformers", "datasets"}:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, _Gone())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def lora() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_lora", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(node_id: int, run: int | None, target: str, label: float, *, parent: dict[str, Any] | None = None,
        code: str | None = "torch::Tensor f(torch::Tensor x) { return x * 2; }\n", depth: int = 0) -> Row:
    node = {"id": node_id, "target_id": target, "run_id": run, "depth": depth, "reward": label}
    return Row(node, (run, target), [0.0], label, code, "cuda" if code else None, parent)


def exported(tmp_path: Path, rows: list[Row]) -> tuple[Path, int]:
    out = tmp_path / "rtg.jsonl"
    return out, export_jsonl(rows, out, GAMMA)


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_STACK, str(SCRIPT), *args], check=False,
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_load_pairs_reads_what_the_exporter_writes(lora: ModuleType, tmp_path: Path) -> None:
    parent = {"status": "faster", "reward": 0.42, "critique": "coalesce the loads"}
    rows = [
        row(1, 7, "mod.py::relu", -0.25),
        row(2, 7, "mod.py::relu", 1.375, parent=parent, depth=1),
        row(3, None, "mod.py::gelu", 0.5),
        row(4, 8, "mod.py::relu", 2.0, code=None),  # no stored code: the exporter leaves it out
    ]
    path, n = exported(tmp_path, rows)
    pairs = lora.load_pairs(path)
    assert n == 3
    assert [p["node"] for p in pairs] == [1, 2, 3]
    assert [p["label"] for p in pairs] == [-0.25, 1.375, 0.5]
    assert [p["answer"] for p in pairs] == ["-0.25", "1.375", "0.5"]
    assert [lora.tree_key(p) for p in pairs] == [(7, "mod.py::relu"), (7, "mod.py::relu"), (None, "mod.py::gelu")]
    assert pairs[1]["prompt"] == reward_prompt("mod.py::relu", 1, parent, "cuda", rows[1].code, GAMMA)
    assert "coalesce the loads" in pairs[1]["prompt"]


def test_a_bad_line_is_named_by_file_and_line_number(lora: ModuleType, tmp_path: Path) -> None:
    path, _ = exported(tmp_path, [row(1, 1, "t", 0.5)])
    good = path.read_text()
    path.write_text(good + "\n" + '{"prompt": "p", "answer": "1"\n')  # line 2 blank, line 3 truncated
    with pytest.raises(SystemExit) as e:
        lora.load_pairs(path)
    message = str(e.value.code)
    assert message.startswith(f"{path}:3: not JSON")
    assert "\n" not in message

    obj = json.loads(good)
    del obj["label"]
    path.write_text(good + good + json.dumps(obj) + "\n")
    with pytest.raises(SystemExit) as e:
        lora.load_pairs(path)
    assert str(e.value.code).startswith(f"{path}:3: missing key(s) label")


def test_a_missing_or_empty_file_says_to_export(lora: ModuleType, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "rtg.jsonl"
    with pytest.raises(SystemExit) as e:
        lora.load_pairs(missing)
    assert str(missing) in str(e.value.code)
    assert "maxcode value export" in str(e.value.code)

    empty, n = exported(tmp_path, [row(1, 1, "t", 0.5, code=None)])
    assert n == 0 and empty.read_text() == ""
    with pytest.raises(SystemExit) as e:
        lora.load_pairs(empty)
    assert "no prompt/answer pairs" in str(e.value.code)
    assert "maxcode value export" in str(e.value.code)


def test_messages_are_the_chat_the_llm_scorer_sends(lora: ModuleType, tmp_path: Path) -> None:
    parent = {"status": "wrong", "reward": -1.0, "critique": None}
    path, _ = exported(tmp_path, [row(5, 3, "mod.py::gemm", -0.9, parent=parent, depth=2)])
    (pair,) = lora.load_pairs(path)
    messages = lora.to_messages(pair)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[0]["content"] == SYSTEM
    assert messages[1]["content"] == pair["prompt"]
    assert messages[1]["content"] == reward_prompt("mod.py::gemm", 2, parent, "cuda",
                                                   "torch::Tensor f(torch::Tensor x) { return x * 2; }\n", GAMMA)
    assert messages[2]["content"] == "-0.9"


def many_trees(tmp_path: Path) -> list[dict[str, Any]]:
    rows = []
    node_id = 0
    for run in (None, 1, 2, 3):
        for target in ("a.py::f", "b.py::g", "c.py::h"):
            for k in range(3):
                node_id += 1
                rows.append(row(node_id, run, target, 0.1 * node_id, depth=k))
    path, _ = exported(tmp_path, rows)
    return json.loads("[" + ",".join(path.read_text().splitlines()) + "]")


def test_split_keeps_each_tree_on_one_side(lora: ModuleType, tmp_path: Path) -> None:
    pairs = many_trees(tmp_path)
    train, test = lora.split_by_tree(pairs, 0.25, seed=0)
    train_trees = {lora.tree_key(p) for p in train}
    test_trees = {lora.tree_key(p) for p in test}
    assert train_trees and test_trees
    assert not train_trees & test_trees
    assert len(test_trees) == 3  # round(0.25 * 12 trees)
    assert sorted(p["node"] for p in train + test) == sorted(p["node"] for p in pairs)
    assert all(sum(lora.tree_key(p) == key for p in test) == 3 for key in test_trees)


def test_split_is_deterministic_for_a_seed(lora: ModuleType, tmp_path: Path) -> None:
    pairs = many_trees(tmp_path)

    def held_out(seed: int, data: list[dict[str, Any]]) -> list[int]:
        return [p["node"] for p in lora.split_by_tree(data, 0.25, seed)[1]]

    assert held_out(0, pairs) == held_out(0, pairs)
    assert held_out(0, pairs) == held_out(0, list(reversed(pairs)))[::-1]  # order of the file does not matter
    assert len({tuple(held_out(seed, pairs)) for seed in range(5)}) > 1


def test_split_edge_cases(lora: ModuleType, tmp_path: Path) -> None:
    pairs = many_trees(tmp_path)
    assert lora.split_by_tree(pairs, 0.0, 0) == (pairs, [])
    one_tree = [p for p in pairs if lora.tree_key(p) == (1, "a.py::f")]
    assert lora.split_by_tree(one_tree, 0.5, 0) == (one_tree, [])
    train, test = lora.split_by_tree(pairs, 0.99, 0)
    assert len({lora.tree_key(p) for p in train}) == 1  # a training tree is always kept
    assert len({lora.tree_key(p) for p in test}) == 11
    with pytest.raises(ValueError):
        lora.split_by_tree(pairs, 1.0, 0)


def test_spearman_averages_tied_ranks(lora: ModuleType) -> None:
    assert lora.average_ranks([10.0, 20.0, 10.0, 30.0]) == [1.5, 3.0, 1.5, 4.0]
    assert lora.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert lora.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # by hand: ranks [1.5, 1.5, 3, 4] and [1, 3, 2, 4], deviations from 2.5 give 3 / sqrt(4.5 * 5)
    assert lora.spearman([1, 1, 2, 3], [5, 7, 6, 8]) == pytest.approx(3 / math.sqrt(22.5))
    assert lora.spearman([1, 1, 1], [1, 2, 3]) is None
    assert lora.spearman([-math.inf, 0.5, 2.0], [-1.0, 0.0, 3.0]) == pytest.approx(1.0)  # no number ranks last


def test_mean_absolute_error_skips_replies_without_a_number(lora: ModuleType) -> None:
    assert lora.mean_absolute_error([1.0, -math.inf, 0.0], [2.0, 5.0, 0.5]) == pytest.approx(0.75)
    assert lora.mean_absolute_error([-math.inf], [1.0]) is None


def test_help_works_without_the_training_stack(tmp_path: Path) -> None:
    r = run_script("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for flag in ("--data", "--base-model", "--out", "--epochs", "--lr", "--lora-r", "--lora-alpha",
                 "--max-length", "--holdout", "--seed"):
        assert flag in r.stdout
    assert "Qwen/Qwen2.5-Coder-1.5B-Instruct" in r.stdout


def test_training_without_the_stack_says_what_to_install(tmp_path: Path) -> None:
    path, _ = exported(tmp_path, [row(1, 1, "t", 0.5), row(2, 2, "t", 1.5)])
    r = run_script("--data", str(path), "--out", "adapter", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("pip install trl peft transformers datasets")
    assert "2 pair(s) from 2 tree(s)" in r.stdout
    assert not (tmp_path / "adapter").exists()


def test_a_missing_export_exits_before_training(tmp_path: Path) -> None:
    r = run_script("--out", "adapter", cwd=tmp_path)
    assert r.returncode == 1
    assert "maxcode value export" in r.stderr
    assert ".maxcode/value/rtg.jsonl" in r.stderr
