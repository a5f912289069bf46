"""The LLM critic, end to end: the proposer is a scripted OpenAI-compatible server, the critic
a scripted Anthropic one (a separate model setting), the oracle real.

What matters: the critic's prompt carries the oracle's measured facts and no number that
was not measured; a critique that cites an unmeasured fact is flagged in the store and
marked in the next proposal's prompt; the critic's calls count against the budget.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import llm_fakes
import pytest
import test_search_llm
from llm_fakes import FAKE_KEY
from test_search_llm import GOOD, run_search, scripted_model

from pytest_maxcode.cli import main as maxcode_main
from pytest_maxcode.store import Store

chain_root = test_search_llm.chain_root
fake_openai = llm_fakes.fake_openai
fake_anthropic = llm_fakes.fake_anthropic

GROUNDED = """DIAGNOSIS: The candidate is correct; see the measured facts for its speed.
NEXT:
- fuse the passes into one
- vectorize the inner loop"""
# nothing in this workload has FLOPs (no matmul), so no fact can back a FLOP/s claim
INVENTED = """DIAGNOSIS: It reaches 1.2 TFLOP/s and occupancy is low.
NEXT:
- raise occupancy"""


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)


def _user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return "".join(b.get("text", "") for b in content) if isinstance(content, list) else content


def _numbers(value: Any) -> list[float]:
    """Every number a verdict holds, and the unit conversions the facts may quote it in."""
    out: list[float] = []
    if isinstance(value, bool) or value is None:
        return out
    if isinstance(value, (int, float)):
        v = float(value)
        return [v, v * 1e6, v * 100, v / 1e9]
    if isinstance(value, str):
        # "llm-26663f.cpp" holds 26663, not -26663: a hyphen is not always a sign
        found = [float(m) for m in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", value)]
        return found + [abs(x) for x in found if x < 0]
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        out += _numbers(item)
    return out


def _traceable(number: str, measured: list[float]) -> bool:
    x = float(number)
    return any(abs(x - m) <= 1e-3 * max(abs(m), 1e-9) + 0.5 * 10 ** -(len(number.split(".")[1]) if "." in number else 0)
               for m in measured)


def test_the_critique_prompt_carries_the_measured_facts_and_nothing_invented(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    fake_openai.respond_with(scripted_model())
    fake_anthropic.respond_with(GROUNDED)
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec(), strategy="best-of-n", budget=5, k=5,
                            critic=fake_anthropic.spec("claude-opus-4-1"), observation="trajectory+critique+best")
        evaluations = {row["candidate_hash"]: row for row in store.evaluations(target_id="lib.chain")}
        nodes = store.nodes("lib.chain")
    assert result.error is None, result.error
    assert result.critic == "llm:anthropic:claude-opus-4-1"
    by_index = {n.index: n for n in result.state.trajectory}
    critic_requests = fake_anthropic.requests
    # the reply without code gets the rule critique only: nothing ran, nothing to diagnose
    assert len(critic_requests) == sum(n.verdict.status != "format" for n in result.state.trajectory) == 4
    seen = set()
    for body in critic_requests:
        assert body["model"] == "claude-opus-4-1"
        text = _user_text(body)
        index = int(re.search(r"## Candidate #(\d+)", text).group(1))
        node = by_index[index]
        seen.add(node.verdict.status)
        facts = text.split("## Measured facts\n", 1)[1].split("\n\n## Class", 1)[0]
        assert node.proposal.spec.text.strip() in text  # the candidate itself
        assert f"- status: {node.verdict.status}" in facts
        verdict = evaluations[node.proposal.spec.hash]
        measured = _numbers(verdict)
        invented = [n for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?", facts) if not _traceable(n, measured)]
        assert not invented, (invented, facts)
        if node.verdict.correct:
            w = node.verdict.diagnostics["workloads"]["w0"]
            assert f"{node.verdict.speedup:.4g}x" in facts
            assert f"median {w['candidate']['median_s'] * 1e6:.4g} us" in facts
            assert f"{100 * w['bandwidth_fraction']:.3g}% of the measured roof" in facts
            assert "GB/s" in facts
        if node.verdict.status == "compile_error":
            assert "floot" in facts  # the compiler's own message
        if node.verdict.status == "wrong":
            assert "elements wrong: 100%" in facts
    assert seen == {"compile_error", "wrong", "not_faster", "faster"}
    # stored with who wrote it, and unflagged: the grounded reply states no number
    critiqued = [n for n in nodes if n["status"] != "format"]
    assert all(n["critic"] == "llm:anthropic:claude-opus-4-1" and n["critique_flags"] == [] for n in critiqued)
    assert all("see the measured facts" in n["critique"] for n in critiqued)
    assert next(n for n in nodes if n["status"] == "format")["critic"] == "rules"


def test_a_critique_citing_unmeasured_facts_is_flagged_stored_and_marked(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_openai.respond_with(lambda body: f"```cpp\n{GOOD}\n```")
    fake_anthropic.respond_with(INVENTED)
    db = tmp_path / "maxcode.db"
    with Store(db) as store:
        result = run_search(chain_root, store, fake_openai.spec(), strategy="refine", budget=2, k=1,
                            critic=fake_anthropic.spec(), observation="trajectory+critique+best")
        nodes = store.nodes("lib.chain")
    assert result.error is None, result.error
    first = nodes[0]
    assert first["critique_flags"] == ["1.2 TFLOP/s", "occupancy (no hardware counters were measured)"]
    assert "Not measured, do not rely on: 1.2 TFLOP/s" in first["critique"]
    # the next proposal's prompt shows the critique with its mark
    second_prompt = _user_text(fake_openai.requests[1])
    assert "## Critique" in second_prompt and "Not measured, do not rely on: 1.2 TFLOP/s" in second_prompt
    code = maxcode_main(["show", "lib.chain", "--store", str(db)])
    out = capsys.readouterr().out
    assert code == 0
    assert "flagged: the critique cites what the oracle did not measure: 1.2 TFLOP/s" in " ".join(out.split())  # rich wraps lines


def test_a_critic_reply_without_the_form_falls_back_to_the_rule_critique(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    fake_openai.respond_with(lambda body: f"```cpp\n{GOOD}\n```")
    fake_anthropic.respond_with("Looks fine to me.")
    with Store(tmp_path / "maxcode.db") as store:
        run_search(chain_root, store, fake_openai.spec(), strategy="best-of-n", budget=1, k=1, critic=fake_anthropic.spec())
        (node,) = store.nodes("lib.chain")
    assert node["critic"].startswith("rules (the critic's reply had no DIAGNOSIS: line")
    assert node["critique"].startswith("[correct:")


def test_critic_calls_count_against_the_llm_call_budget_and_think_when_asked(
    chain_root: Path, tmp_path: Path, fake_openai: Any, fake_anthropic: Any
) -> None:
    samples = itertools.count()  # each reply its own source: a repeat is not critiqued again
    fake_openai.respond_with(lambda body: f"```cpp\n// sample {next(samples)}\n{GOOD}\n```")
    fake_anthropic.respond_with(GROUNDED)
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec(), strategy="best-of-n", budget=8, k=4, llm_calls=6,
                            critic=fake_anthropic.spec(), critic_thinking_tokens=2048)
        calls = store.llm_totals(run_id=None, target_id="lib.chain")
    # 6 calls: 3 proposals and their 3 critiques, never 4 proposals and an unpaid critique
    assert len(fake_openai.requests) == 3 and len(fake_anthropic.requests) == 3
    assert int(calls["api_calls"]) == 6
    assert "LLM-call budget of 6 per target reached" in result.stop_reason
    body = fake_anthropic.requests[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 2048


def test_critic_llm_without_a_proposer_model_is_one_usage_line(tmp_path: Path) -> None:
    from pytest_maxcode.errors import MaxcodeError
    from pytest_maxcode.llm import make_critic_service
    from pytest_maxcode.options import Settings

    with pytest.raises(MaxcodeError, match=r"^--maxcode-critic=llm uses the proposer's model, and there is none"):
        make_critic_service(Settings(critic="llm"), tmp_path, None, None)
    with pytest.raises(MaxcodeError, match=r"^--maxcode-critic='gpt': unknown provider 'gpt'; use one of: rules, llm"):
        make_critic_service(Settings(critic="gpt"), tmp_path, None, None)
    assert json.dumps(make_critic_service(Settings(critic="rules"), tmp_path, None, None)) == "null"
