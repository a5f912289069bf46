"""The budget's promise: an LLM-call limit is never exceeded, whatever reranks or critiques.

Every LLM request (a proposal, a reranker's question, a critique) takes its place in the
budget before it is sent and is not sent without one; a reranked step asks only as many
proposals as there is room for. Counted here as the requests that reach the scripted servers
on 127.0.0.1, through the real SDKs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llm_fakes
import pytest
import test_search_llm
from llm_fakes import FAKE_KEY, code_reply
from test_search_llm import BROKEN, GOOD, SLOW, WRONG, run_search
from test_value import KERNEL, synthetic_store

from pytest_maxcode.critique import LLMCritic
from pytest_maxcode.llm import LLMService, make_client, parse_llm_spec
from pytest_maxcode.model.search import Ask, Node, Proposal
from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.budget import Budget, Limits, Meter
from pytest_maxcode.search.llm_policy import LLMPolicy
from pytest_maxcode.search.prompts import PromptContext
from pytest_maxcode.search.state import SearchState
from pytest_maxcode.store import Store
from pytest_maxcode.value import model as vm
from pytest_maxcode.value.scorer import LLMScorer

chain_root = test_search_llm.chain_root
fake_openai = llm_fakes.fake_openai
fake_anthropic = llm_fakes.fake_anthropic

LIMIT = "LLM-call budget of 2 per target reached"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)


@pytest.fixture(scope="module")
def light_model(chain_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A light reward-to-go model where ``--maxcode-rerank=light`` looks for it."""
    db = tmp_path_factory.mktemp("value") / "maxcode.db"
    synthetic_store(db)
    with Store(db) as store:
        rows = vm.load_rows(store, 0.9)
    return vm.save(vm.fit(rows), chain_root / ".maxcode" / "value", gamma=0.9, rows=rows)


def _servers(fake_openai: Any, fake_anthropic: Any) -> dict[str, str]:
    """The proposer and scorer answer on the OpenAI server (by model), the critic on the Anthropic one."""
    fake_openai.respond_with(lambda body: "3.1" if body["model"] == "rtg" else code_reply(GOOD))
    fake_anthropic.respond_with("DIAGNOSIS: see the measured facts.\nNEXT:\n- keep going")
    return {"proposer": fake_openai.spec("local-model"), "scorer": fake_openai.spec("rtg"), "critic": fake_anthropic.spec()}


RERANKERS = {
    "none": {},
    "light": {"rerank": "light"},
    "llm": {"rerank": "llm", "rerank_llm": "scorer"},
    "critic": {"critic": "critic"},
    "llm+critic": {"rerank": "llm", "rerank_llm": "scorer", "critic": "critic"},
}


@pytest.mark.parametrize("setting", list(RERANKERS))
def test_two_llm_calls_are_never_exceeded_and_the_budget_is_the_stop_reason(
    setting: str, chain_root: Path, light_model: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    spec = _servers(fake_openai, fake_anthropic)
    overrides = {key: spec.get(value, value) for key, value in RERANKERS[setting].items()}
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, spec["proposer"], strategy="maxcode", k=4, rerank_top=1, budget=8,
                            llm_calls=2, **overrides)
        totals = store.llm_totals(target_id="lib.chain")
    sent = len(fake_openai.requests) + len(fake_anthropic.requests)
    assert result.error is None, result.error
    assert sent <= 2, [b.get("model") for b in fake_openai.requests + fake_anthropic.requests]
    assert int(totals["api_calls"]) == sent
    assert result.stop_reason == LIMIT
    assert result.state.trajectory  # the calls went to a search, not nowhere


def test_a_scorer_over_the_builtin_policy_asks_what_fits(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    """Proposals that cost nothing still cost a question each once reranked: two questions, then the limit."""
    spec = _servers(fake_openai, fake_anthropic)
    seeds = chain_root / "maxcode_kernels" / "seeds" / "lib.chain"
    seeds.mkdir(parents=True, exist_ok=True)
    for name, text in (("good", GOOD), ("slow", SLOW), ("wrong", WRONG), ("broken", BROKEN)):
        (seeds / f"{name}.cpp").write_text(text)
    try:
        with Store(tmp_path / "maxcode.db") as store:
            result = run_search(chain_root, store, None, policy="builtin", strategy="maxcode", k=4, rerank="llm", rerank_top=1,
                                rerank_llm=spec["scorer"], torch_compile=False, budget=8, llm_calls=2)
    finally:
        shutil.rmtree(chain_root / "maxcode_kernels")
    assert result.error is None, result.error
    assert [b["model"] for b in fake_openai.requests] == ["rtg", "rtg"] and not fake_anthropic.requests
    assert len(result.state.trajectory) == 1  # two proposals scored, the top one evaluated
    assert result.stop_reason == LIMIT


# -- each caller on its own: a request without a place is not sent ---------------------------


def _service(spec: str, root: Path) -> LLMService:
    return LLMService(make_client(parse_llm_spec(spec), root=root, retries=0), store_path=None)


def _spec(tmp_path: Path, name: str, text: str) -> CandidateSpec:
    return CandidateSpec(tmp_path / f"{name}.cpp", "native", "cpp", text)


def test_the_policy_sends_only_the_asks_the_budget_has_room_for(tmp_path: Path, fake_openai: Any) -> None:
    fake_openai.respond_with(code_reply(KERNEL.format(body="")))
    budget = Budget(Limits(llm_calls=2))
    ctx = PromptContext(target_id="t", kind="function", reference_source="def f(x): ...", fmt="native", lang="cpp",
                        entry="maxcode_run")
    with _service(fake_openai.spec("local-model"), tmp_path) as service:
        policy = LLMPolicy(service, ctx, tmp_path / "out", observation=("best",), budget=budget, run_id=None)
        got = policy.propose(SearchState("t"), [Ask()] * 4)
        again = policy.propose(SearchState("t"), [Ask()])
    assert len(got) == 2 and all(p.spec is not None for p in got) and again == []
    assert len(fake_openai.requests) == 2
    assert budget.exhausted() == LIMIT and budget.calls_left() == 0


def test_the_scorer_asks_only_the_questions_the_budget_has_room_for(tmp_path: Path, fake_openai: Any) -> None:
    fake_openai.respond_with("2.5")
    budget = Budget(Limits(llm_calls=2))
    proposals = [Proposal(_spec(tmp_path, f"k{i}", KERNEL.format(body=f"// {i}")), "test") for i in range(4)]
    with _service(fake_openai.spec("rtg"), tmp_path) as service:
        scorer = LLMScorer(service, 1, target_id="t", budget=budget, run_id=None)
        scores = scorer.scores(proposals)
    assert scores == [2.5, 2.5, float("-inf"), float("-inf")]  # the last two were not asked
    assert len(fake_openai.requests) == 2 and budget.exhausted() == LIMIT


def test_the_critic_falls_back_to_the_rules_without_room(tmp_path: Path, fake_anthropic: Any) -> None:
    fake_anthropic.respond_with("DIAGNOSIS: it does not compile.\nNEXT:\n- fix it")
    budget = Budget(Limits(llm_calls=1))
    nodes = [Node(i, Proposal(_spec(tmp_path, f"c{i}", KERNEL.format(body="floot x;")), "test"),
                  Verdict("c.cpp", "compile_error", reasons=["error: 'floot' was not declared"]), -0.75, 0, 0) for i in range(3)]
    with _service(fake_anthropic.spec(), tmp_path) as service:
        critic = LLMCritic(service, reference="def f(x): ...", lang="cpp", run_id=None, target_id="t", budget=budget)
        critiques = critic.critique_all(nodes)
    assert len(fake_anthropic.requests) == 1
    assert critiques[0].critic == critic.label and critiques[0].diagnosis == "it does not compile."
    assert all(c.critic.startswith("rules (no LLM-call room left for the critic") for c in critiques[1:])
    assert all(c.kind.startswith("compile:") for c in critiques)


# -- the accounting ----------------------------------------------------------------------


@dataclass
class Reply:
    source: str = "api"
    tokens: int = 10
    cost_usd: float = 0.5


def test_places_are_taken_before_and_settled_after() -> None:
    run = Meter(Limits(llm_calls=3), "per run")
    budget = Budget(Limits(llm_calls=2, tokens=25), run)
    first, second = budget.reserve(), budget.reserve()
    assert first is not None and second is not None
    assert budget.reserve() is None  # two in flight: the target has no place left
    assert budget.exhausted() is None  # nothing is spent yet: in flight is not spent
    with first:  # a failed request: its place comes back
        pass
    third = budget.reserve()
    assert third is not None
    third.settle(Reply(source="cache"))  # a cache hit costs nothing and frees its place
    second.settle(Reply())
    assert budget.target.used("llm_calls") == 1 and run.used("llm_calls") == 1
    assert budget.target.used("tokens") == 10 and run.used("cost_usd") == 0.5
    last = budget.reserve()
    assert last is not None
    last.settle(Reply(tokens=20))
    last.settle(Reply(tokens=20))  # settling twice charges once
    assert budget.target.used("tokens") == 30
    assert budget.exhausted() == LIMIT and budget.reserve() is None
    # the run meter keeps its own count: another target still has one place in it
    other = Budget(Limits(), run)
    assert other.reserve() is not None and other.reserve() is None


def test_a_reached_token_limit_sends_nothing_more() -> None:
    budget = Budget(Limits(tokens=10))
    held = budget.reserve()
    assert held is not None
    held.settle(Reply(tokens=12))  # replies in flight may overshoot tokens, by their own size
    assert budget.reserve() is None and budget.calls_left() == 0


@pytest.mark.parametrize(
    ("spends", "calls", "asks"),
    [
        ({"asked": 1}, 2, 2),  # two requests; the top 2 of them are evaluated
        ({"asked": 1, "scored": 1}, 2, 2),
        ({"asked": 1, "scored": 1, "evaluated": 1}, 2, 1),
        ({"asked": 1, "scored": 1}, 7, 3),  # 3 asked + 3 questions; 4 would need 8
        ({"scored": 1}, 3, 3),
        ({}, 0, 4),  # nothing costs a call: k
    ],
)
def test_a_reranked_step_asks_what_fits(spends: dict[str, int], calls: int, asks: int) -> None:
    budget = Budget(Limits(llm_calls=calls))
    budget.spends(**spends)
    assert budget.asks(4, 2) == asks
