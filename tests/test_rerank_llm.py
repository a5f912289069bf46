"""``--maxcode-rerank=llm``: a generative reward-to-go model behind an OpenAI-compatible
endpoint (here a scripted server on 127.0.0.1) scores the maxcode strategy's k proposals,
and only the top m reach the oracle."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import llm_fakes
import pytest
import test_search_llm
from llm_fakes import FAKE_KEY, code_reply
from test_search_llm import BROKEN, GOOD, SLOW, WRONG, run_search

from pytest_maxcode.store import Store
from pytest_maxcode.value.model import reward_prompt
from pytest_maxcode.value.scorer import parse_score

chain_root = test_search_llm.chain_root
fake_openai = llm_fakes.fake_openai
fake_anthropic = llm_fakes.fake_anthropic


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)


def _score(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    if "floot" in prompt:
        return "-1"
    if "v * v + 0.5f" in prompt:
        return "-0.5"
    if "rep < 1000" in prompt:
        return "Predicted: 0.3"
    return "3.1"


def test_the_scorer_sees_the_exported_question_and_only_the_top_m_are_evaluated(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    kernels = itertools.cycle([BROKEN, SLOW, WRONG, GOOD])
    fake_anthropic.respond_with(lambda body: code_reply(next(kernels)))
    fake_openai.respond_with(_score)
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_anthropic.spec(), strategy="maxcode", k=4, depth=2, budget=8,
                            rerank="llm", rerank_top=1, rerank_llm=fake_openai.spec("rtg-lora"))
        nodes = store.nodes("lib.chain")
    assert result.error is None, result.error
    # two steps of four proposals each, four questions each: one evaluation per step
    assert len(fake_anthropic.requests) == 8 and len(fake_openai.requests) == 8
    assert len(nodes) == 2 and all(n["status"] in ("faster", "not_faster") for n in nodes)
    assert all(n.proposal.spec.text.strip() == GOOD.strip() for n in result.state.trajectory)
    first = fake_openai.requests[0]
    assert first["model"] == "rtg-lora"
    question = first["messages"][-1]["content"]
    assert question.startswith("Target lib.chain, depth 0. Parent: the reference (a first attempt)")
    code = question.split("```cpp\n", 1)[1].rsplit("\n```", 1)[0]
    assert question == reward_prompt("lib.chain", 0, None, "cpp", code, 0.9)


def test_rerank_llm_outside_the_maxcode_strategy_is_an_error(chain_root: Path, tmp_path: Path, fake_anthropic: Any) -> None:
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_anthropic.spec(), strategy="refine", rerank="llm")
    assert result.error == "--maxcode-rerank=llm works with --maxcode-strategy=maxcode, not refine"


@pytest.mark.parametrize("reply, score", [("3.25", 3.25), ("About -0.5, I think", -0.5), ("no idea", float("-inf")), ("1e-2", 0.01)])
def test_parse_score_takes_the_first_number(reply: str, score: float) -> None:
    assert parse_score(reply) == score
