"""The oracle as an RL reward: TRL's calling convention, the search's tiers, the curriculum.

Every reward call below is made the way TRL's GRPOTrainer makes it (``_calculate_rewards``):
keyword ``prompts``, ``completions`` and ``completion_ids``, every other dataset column as a
list with one value per completion, plus TRL's own extras (``trainer_state``, ``log_extra``,
``log_metric``). One reward (and so one warm oracle per problem) serves the whole module.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.oracle.check import CheckConfig
from pytest_maxcode.search.prompts import INSTRUCTIONS
from pytest_maxcode.search.reward import TIERS
from pytest_maxcode.search.reward import reward as search_reward
from pytest_maxcode.search.strategies.qd import Stage

DATA = Path(__file__).parent / "data" / "chain"
CONFIG = CheckConfig(time_budget=0.05, timeout=30)

GOOD = (DATA / "good.cpp").read_text()  # y = relu(2x + b)^2 - 0.5 with omp parallel for and omp simd
PLAIN = "\n".join(line for line in GOOD.splitlines() if not line.startswith("#pragma"))  # loop-level only
WRONG = GOOD.replace("- 0.5f", "- 0.25f")
BROKEN = GOOD.replace("return 0;", "return not_declared;")

SCALE_ADD = '''"""y = 3x + 1 in KernelBench format."""

import torch

N = 4096


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 3.0 + 1.0


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

SCALE_ADD_CPP = '''#include <dlpack/dlpack.h>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  int64_t n = 1;
  for (int i = 0; i < in[0].ndim; ++i) n *= in[0].shape[i];
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * 3.0f + 1.0f;
  return 0;
}
'''

TARGET_CPP = '''#include <dlpack/dlpack.h>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * 2.0f + b[c];
  return 0;
}
'''

STAGED = {
    "stages": [{"techniques": "any"}],
    "targets": {"L1/3_*": {"stages": [{"steps": 5, "techniques": ["loop"]}, {"techniques": "any"}]}},
}


def reply(code: str, tag: str = "cpp") -> str:
    return f"Plan: fuse the chain into one pass.\n\n```{tag}\n{code.rstrip()}\n```\n"


def trl_call(fn: Any, rows: list[dict[str, Any]], completions: list[Any]) -> tuple[list[float], dict[str, list[Any]]]:
    """Call ``fn`` as TRL's GRPOTrainer does; an async ``fn`` is awaited as TRL awaits it."""
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs: dict[str, Any] = {k: [r[k] for r in rows] for k in keys}
    logged: dict[str, list[Any]] = {}
    kwargs.update(trainer_state=None, log_extra=lambda column, values: logged.setdefault(column, []).extend(values),
                  log_metric=lambda name, value: logged.setdefault(name, []).append(value))
    out = fn(prompts=[r["prompt"] for r in rows], completions=completions, completion_ids=[[1, 2, 3]] * len(rows), **kwargs)
    if inspect.iscoroutine(out):
        out = asyncio.run(out)
    return out, logged


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KernelBench checkout with three tiny level-1 problems."""
    root = tmp_path_factory.mktemp("rl")
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True)
    chain = (DATA / "ref.py").read_text()
    (level / "1_chain.py").write_text(chain)
    (level / "2_scale_add.py").write_text(SCALE_ADD)
    (level / "3_chain_staged.py").write_text(chain)
    return root


@pytest.fixture(scope="module")
def rows(kb: Path) -> dict[int, dict[str, Any]]:
    from pytest_maxcode.rl import kernelbench_dataset

    return {i: r for i, r in enumerate(kernelbench_dataset(kb, 1, device="cpu", describe_device=False), 1)}


@pytest.fixture(scope="module")
def reward(kb: Path) -> Any:
    from pytest_maxcode.rl import Curriculum, OracleReward

    with OracleReward(kb, CONFIG, device="cpu", curriculum=Curriculum(STAGED, advance_after=2)) as r:
        yield r


def test_dataset_rows_hold_the_searchs_first_prompt(kb: Path, rows: dict[int, dict[str, Any]]) -> None:
    from pytest_maxcode.rl import kernelbench_dataset

    row = rows[1]
    assert row["problem"] == str(kb / "KernelBench" / "level1" / "1_chain.py")
    assert (row["problem_id"], row["format"], row["lang"]) == ("L1/1_chain", "native", "cpp")
    system, user = row["prompt"]
    assert (system["role"], user["role"]) == ("system", "user")
    assert 'extern "C" int maxcode_run' in system["content"] and "def get_inputs" in system["content"]
    assert user["content"].endswith(INSTRUCTIONS["initial"])
    assert "Techniques permitted" not in user["content"] and "permitted" not in row

    (compat,) = kernelbench_dataset(kb, 1, "2", fmt="compat", device="cpu", describe_device=False, permitted=["threads"])
    assert "ModelNew" in compat["prompt"][0]["content"] and compat["lang"] == "py"
    assert "Use only:\n- loop: " in compat["prompt"][1]["content"] and compat["permitted"] == ["threads"]


def test_a_scaled_dataset_points_at_the_scaled_problem_files(kb: Path, tmp_path: Path) -> None:
    from pytest_maxcode.rl import kernelbench_dataset

    (row,) = kernelbench_dataset(kb, 1, "2", scale=2.0, device="cpu", describe_device=False, work_dir=tmp_path)
    assert Path(row["problem"]) == tmp_path / "level1" / "2_scale_add.py" and row["problem_id"] == "L1/2_scale_add"
    assert "\nN = 8192\n" in Path(row["problem"]).read_text() and "N = 8192" in row["prompt"][0]["content"]
    (measured,) = kernelbench_dataset(kb, 1, "2", scale=2.0, device="cpu", describe_device=False, work_dir=tmp_path, measure=True)
    assert "-> outputs float32[8192]" in measured["prompt"][0]["content"]


def test_a_completion_without_code_gets_the_format_tier_and_starts_no_worker(kb: Path, rows: dict[int, dict[str, Any]]) -> None:
    from pytest_maxcode.rl import OracleReward

    with OracleReward(kb, CONFIG, device="cpu") as fresh:
        replies = ["I would fuse the loops.", reply("print('hi')\n", "python"), "```cpp\nextern \"C\" int maxcode_run("]
        values, logged = trl_call(fresh, [rows[1]] * 3, replies)
        assert values == [TIERS["format"]] * 3
        assert [v.reasons[0] for v in fresh.last_verdicts] == [
            "the reply has no fenced code block", "the reply's code blocks are python, not cpp",
            "the reply's code block is not closed (cut off at max_tokens?)",
        ]
        assert fresh.cached_problems == [] and logged["maxcode_status"] == ["format"] * 3
        assert fresh.__name__ == "maxcode_speedup"


def test_correct_compile_error_and_wrong_kernels_get_their_rewards(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    values, logged = trl_call(reward, [rows[1]] * 4, [reply(GOOD), reply(BROKEN), reply(WRONG), reply(GOOD)])
    good, broken, wrong, again = reward.last_verdicts
    # a correct kernel earns its speedup; one whose blocks disagreed (a busy runner) is undecided
    # and earns at most 1.0, by the search's rule (search/reward.py)
    assert good.correct and good.speedup > 0 and values[0] == search_reward(good), good.reasons
    assert good.diagnostics.get("undecided") or values[0] == good.speedup, good.reasons
    assert again is good and values[3] == values[0]  # one build and timing for equal completions
    assert broken.status == "compile_error" and values[1] == TIERS["compile_error"]
    assert wrong.status == "wrong" and values[2] == TIERS["wrong"]
    assert logged["maxcode_status"] == [good.status, "compile_error", "wrong", good.status]
    assert logged["maxcode/correct"] == [0.5]


def test_conversational_completions_are_read_like_strings(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    as_text, _ = trl_call(reward, [rows[1]] * 3, [reply(GOOD), reply(WRONG), "no code"])
    chats = [[{"role": "assistant", "content": reply(GOOD)}],
             [{"role": "assistant", "content": [{"type": "text", "text": reply(WRONG)}]}],
             [{"role": "assistant", "content": "no code"}]]
    as_chat, _ = trl_call(reward, [rows[1]] * 3, chats)
    assert as_chat == as_text and as_chat[1:] == [TIERS["wrong"], TIERS["format"]]


def test_rewards_are_the_searchs_tiers_in_the_searchs_order(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    from pytest_maxcode.rl import score

    values, _ = trl_call(reward, [rows[1]] * 4, ["no code", reply(BROKEN), reply(WRONG), reply(GOOD)])
    verdicts = reward.last_verdicts
    assert values == [search_reward(v) for v in verdicts]
    assert [v.status for v in verdicts[:3]] == ["format", "compile_error", "wrong"] and verdicts[3].correct
    assert values == sorted(values) and len(set(values)) == 4
    logs = [score(v, "log") for v in verdicts]
    assert logs[:3] == values[:3] and logs[3] == pytest.approx(math.log2(1 + search_reward(verdicts[3]))) and logs[3] > 0
    assert verdicts[3].diagnostics.get("undecided") or values[3] == verdicts[3].speedup


def test_completions_are_grouped_by_problem_one_oracle_each(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    values, _ = trl_call(reward, [rows[2], rows[1], rows[2]], [reply(SCALE_ADD_CPP), reply(GOOD), reply(GOOD)])
    scale_add, chain, chain_on_scale_add = reward.last_verdicts
    assert scale_add.correct and chain.correct, (scale_add.reasons, chain.reasons)
    assert chain_on_scale_add.status in ("wrong", "runtime_error")  # the chain's kernel checked against problem 2
    assert values[:2] == [search_reward(scale_add), search_reward(chain)]
    assert all(v.diagnostics.get("undecided") or r == v.speedup for v, r in zip((scale_add, chain), values))
    assert {str(Path(rows[1]["problem"])), str(Path(rows[2]["problem"]))} <= set(reward.cached_problems)


def test_the_async_variants_give_the_same_values(kb: Path, reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    from pytest_maxcode.rl import AsyncOracleReward, async_reward

    batch = [rows[1]] * 4
    completions = [reply(GOOD), reply(BROKEN), reply(WRONG), "no code"]
    expected, _ = trl_call(reward, batch, completions)
    fn = async_reward(reward)
    assert inspect.iscoroutinefunction(fn) and fn.__name__ == "maxcode_speedup"
    assert trl_call(fn, batch, completions)[0] == expected
    assert asyncio.run(reward.acall(prompts=None, completions=completions, problem=[r["problem"] for r in batch])) == expected

    async def both() -> list[list[float]]:  # two at once, as TRL gathers its async reward functions
        return list(await asyncio.gather(fn(completions=completions, problem=[r["problem"] for r in batch]),
                                         reward.acall(completions=completions, problem=[r["problem"] for r in batch])))

    assert asyncio.run(both()) == [expected, expected]
    with AsyncOracleReward(kb, CONFIG, device="cpu") as areward:
        assert inspect.iscoroutinefunction(areward.__call__)
        assert trl_call(areward, [rows[1]], ["no code"])[0] == [TIERS["format"]]


def test_a_permitted_column_bars_other_techniques(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    batch = [dict(rows[1], permitted=["loop"]), dict(rows[1], permitted=["threads", "vectorized"]), dict(rows[1], permitted=None)]
    values, _ = trl_call(reward, batch, [reply(GOOD)] * 3)
    barred, allowed, anything = reward.last_verdicts
    assert barred.status == "format" and values[0] == TIERS["format"]
    assert barred.reasons == ["uses threads, vectorized, not permitted (permitted: loop)"]
    assert allowed.correct and anything.correct


def test_the_curriculum_restricts_techniques_and_advances(reward: Any, rows: dict[int, dict[str, Any]]) -> None:
    cur, row = reward.curriculum, rows[3]
    assert cur.permitted(row["problem"]) == ("loop",) and cur.permitted(rows[1]["problem"]) is None
    prompt = cur.transform({"prompt": [row["prompt"]], "problem": [row["problem"]]})["prompt"][0]
    assert "Use only:\n- loop: " in prompt[1]["content"] and "Not permitted now" in prompt[1]["content"]

    values, _ = trl_call(reward, [row] * 2, [reply(GOOD), reply(PLAIN)])
    barred, plain = reward.last_verdicts
    assert barred.status == "format" and barred.reasons == [
        "uses threads, vectorized, not permitted in stage 1 (permitted: loop)"]
    # its reward as outside the curriculum: the speedup (capped at 1.0 when a loaded machine left it undecided)
    assert plain.correct and values[1] == search_reward(plain) and cur.stage_index(row["problem"]) == 0
    assert cur.correct_seen(row["problem"]) == 1

    trl_call(reward, [row], [reply(PLAIN)])  # the second correct one: the problem moves on
    assert cur.stage_index(row["problem"]) == 1 and cur.permitted(row["problem"]) is None
    values, _ = trl_call(reward, [row], [reply(GOOD)])
    assert reward.last_verdicts[0].correct and values[0] > 0
    prompt = cur.transform({"prompt": [prompt], "problem": [row["problem"]]})["prompt"][0]
    assert "Techniques permitted" not in prompt[1]["content"] and prompt[1]["content"] == row["prompt"][1]["content"]
    assert cur.stage_index(rows[1]["problem"]) == 0  # the other problems have their own stage


def test_curriculum_schedules_and_checkpoints() -> None:
    from pytest_maxcode.rl import Curriculum

    by_steps = Curriculum([Stage(frozenset({"loop"}), 2), Stage(frozenset({"loop", "threads"}), 1), Stage(None, None)])
    moved = [by_steps.record("p", correct) for correct in (True, False, True, True, True)]
    assert moved == [False, False, True, True, False] and by_steps.stage_index("p") == 2
    saved = by_steps.state_dict()
    restored = Curriculum([{"steps": 2, "techniques": ["loop"]}, {"techniques": "any"}])
    restored.load_state_dict({"index": {"p": 1}, "correct": {}})
    assert restored.permitted("p") is None and saved["index"] == {"p": 2}
    assert by_steps.barred("q", "#pragma omp parallel for\n") == (
        "uses threads, not permitted in stage 1 (permitted: loop)")
    with pytest.raises(ValueError, match="advance_after"):
        Curriculum([{"techniques": ["loop"]}], advance_after=0)
    with pytest.raises(ValueError, match="unknown technique"):
        Curriculum({"stages": [{"techniques": ["warp-magic"]}]})


def test_a_problem_the_reward_cannot_find_is_an_error(reward: Any) -> None:
    with pytest.raises(MaxcodeError, match="neither a KernelBench problem file nor a target"):
        reward(prompts=["p"], completions=[reply(GOOD)], problem=["no/such/problem"])
    with pytest.raises(MaxcodeError, match="needs a problem column"):
        reward(prompts=["p"], completions=[reply(GOOD)])


def test_targets_a_maxcode_run_captured_become_rows_and_rewards(tmp_path: Path) -> None:
    import torch

    from pytest_maxcode.rl import OracleReward, targets_dataset
    from pytest_maxcode.targets.capture import signature

    (tmp_path / "mylib.py").write_text("def scale_add(x, b):\n    return x * 2.0 + b\n")
    inputs = tmp_path / ".maxcode" / "inputs" / "mylib.scale_add"
    inputs.mkdir(parents=True)
    values = [torch.randn(64, 256), torch.randn(256)]
    torch.save({"signature": signature(tuple(values)), "sets": [values]}, inputs / "0123abcd.pt")

    (row,) = targets_dataset(tmp_path, device="cpu", describe_device=False)
    assert (row["problem"], row["problem_id"]) == ("mylib.scale_add", "mylib.scale_add")
    assert "def scale_add(x, b)" in row["prompt"][0]["content"]
    assert "- 0123abcd: float32[64,256]@cpu, float32[256]@cpu" in row["prompt"][0]["content"]
    with OracleReward(tmp_path, CONFIG, device="cpu") as r:
        got, _ = trl_call(r, [row] * 2, [reply(TARGET_CPP), reply(TARGET_CPP.replace("2.0f", "3.0f"))])
        ok, wrong = r.last_verdicts
        assert ok.correct and got[0] == search_reward(ok), ok.reasons
        assert wrong.status == "wrong" and got[1] == TIERS["wrong"]


def test_one_grpo_step_with_a_tiny_model(kb: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    from pytest_maxcode.rl import (
        Curriculum,
        OracleReward,
        async_reward,
        kernelbench_dataset,
    )

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<pad>": len(vocab), "<eos>": len(vocab) + 1})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant: {% endif %}")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                                         pad_token_id=vocab["<pad>"], eos_token_id=vocab["<eos>"]))
    curriculum = Curriculum(STAGED, advance_after=2)
    dataset = kernelbench_dataset(kb, 1, "1,3", device="cpu", describe_device=False, curriculum=curriculum, as_dataset=True)
    with OracleReward(kb, CONFIG, device="cpu", curriculum=curriculum) as reward:
        args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_completion_length=8,
                          max_steps=1, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no", bf16=False)
        funcs = [reward, async_reward(reward, name="maxcode_speedup_async")]
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=funcs, args=args, train_dataset=dataset)
        trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["rewards/maxcode_speedup/mean"] == logged["rewards/maxcode_speedup_async/mean"] == TIERS["format"]
    assert trainer.state.global_step == 1


def test_the_training_script_dry_runs_and_says_what_to_install(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).parents[1] / "examples" / "grpo_kernels" / "train_grpo.py"
    spec = importlib.util.spec_from_file_location("train_grpo", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    stages = '[{"steps": 2, "techniques": ["loop"]}, {"techniques": "any"}]'
    assert script.main(["--kernelbench", str(kb), "--problems", "1", "--device", "cpu", "--stages", stages, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 problem(s); the first prompt (L1/1_chain)" in out and "Use only:\n- loop: " in out
    if importlib.util.find_spec("trl") is None:
        assert script.main(["--kernelbench", str(kb), "--device", "cpu"]) == 2
        assert "pip install 'trl" in capsys.readouterr().err


@pytest.mark.gpu
def test_cuda_kernels_are_rewarded_on_the_gpu(kb: Path) -> None:
    from pytest_maxcode.rl import OracleReward, kernelbench_dataset

    (row,) = kernelbench_dataset(kb, 1, "1", device="cuda", describe_device=False)
    assert row["lang"] == "cuda" and "CUDA C++17" in row["prompt"][0]["content"]
    with OracleReward(kb, CONFIG, device="cuda") as r:
        cuda = (DATA / "chain.cu").read_text()
        values, _ = trl_call(r, [row] * 2, [reply(cuda, "cuda"), reply(cuda.replace("0.5f", "0.25f"), "cuda")])
        ok, wrong = r.last_verdicts
        assert ok.correct and values[0] == ok.speedup, ok.reasons
        assert wrong.status == "wrong" and values[1] == TIERS["wrong"]
