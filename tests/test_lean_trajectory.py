"""Lean trajectories (issue 17): one node, one trajectory line and one oracle run per source,
every sample still in the store, and a prompt cut to its token budget oldest line first.

The search runs for real: the OpenAI SDK against a scripted server on 127.0.0.1, the real
oracle building and timing the chain kernel of ``test_search_llm`` on this CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import llm_fakes
import test_search_llm
from llm_fakes import code_reply
from test_search_llm import GOOD, NO_CODE, task_of

from pytest_maxcode import options
from pytest_maxcode.llm import make_service
from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.loop import SearchContext, SearchResult, search_target
from pytest_maxcode.search.observation import TRAJECTORY_LINES
from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.search.prompts import PromptContext, build_request, estimate_tokens
from pytest_maxcode.search.state import Proposal, SearchState
from pytest_maxcode.store import Store

fake_openai = llm_fakes.fake_openai
chain_root = test_search_llm.chain_root  # the chain project: its lib.py and captured inputs


def search(root: Path, store: Store, llm_spec: str, progress: list[str], **overrides: Any) -> SearchResult:
    """``test_search_llm.run_search``, with the progress lines kept."""
    settings = options.load_settings({}, None).replace(llm=llm_spec, llm_concurrency=1, **overrides)
    target = TargetInfo("lib.chain", "lib", "chain", root / "lib.py", "function", "cpp")
    service = make_service(settings, root, store.path)
    try:
        return search_target(target, sorted((root / ".maxcode" / "inputs" / "lib.chain").glob("*.pt")), root, settings,
                             SearchContext(store, store.begin_run("test", "0"), progress.append, llm=service))
    finally:
        service.close()


def test_four_identical_replies_are_one_oracle_run_one_node_and_one_line(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    # each first sample is the same kernel, spelled with different trailing whitespace (still one source)
    spellings = iter([GOOD, GOOD.replace(";\n", ";  \n"), GOOD + "\n\n", GOOD.replace("\n", " \n")])

    def model(body: dict[str, Any]) -> str:
        return code_reply(next(spellings)) if "first implementation" in task_of(body) else NO_CODE

    fake_openai.respond_with(model)
    progress: list[str] = []
    with Store(tmp_path / "maxcode.db") as store:
        # k=4 first samples, then one improvement of the best, whose prompt is read below
        result = search(chain_root, store, fake_openai.spec("local-model"), progress, strategy="maxcode", k=4, budget=5)
        rows = store.nodes("lib.chain")
        evaluations = store.db.execute("SELECT COUNT(*) FROM evaluations WHERE target_id='lib.chain'").fetchone()[0]
    assert result.error is None, result.error
    assert len(fake_openai.requests) == 5
    first, second = result.state.trajectory
    # correct (faster unless the machine is busy: the timing is not what this test is about)
    assert first.samples == 4 and first.verdict.correct and first.parent is None
    assert second.samples == 1 and second.verdict.status == "format" and second.parent is first
    assert evaluations == 1  # one oracle run for the four samples (the reply without code needs none)
    assert any("evaluating 1 candidate(s), 3 repeat(s)" in m for m in progress), progress
    # the store keeps every sample: a row each, with its own LLM call, on the one candidate and verdict
    assert len(rows) == 5
    samples = [r for r in rows if r["candidate_hash"] == first.proposal.spec.hash]
    assert len(samples) == 4 and {r["status"] for r in samples} == {first.verdict.status}
    assert len({r["llm_call_id"] for r in samples}) == 4 and first.id == samples[0]["id"]
    assert rows[4]["parent_id"] == first.id and rows[4]["status"] == "format"
    # the next prompt lists the source once, with its count
    prompt = fake_openai.requests[4]["messages"][-1]["content"]
    trajectory = prompt.split("## Trajectory", 1)[1].split("##", 1)[0]
    lines = [line for line in trajectory.splitlines() if line.startswith("#")]
    assert lines == [lines[0]] and lines[0].startswith(f"#0 from the reference: {first.verdict.status}") and "(sampled 4 times)" in lines[0]
    assert "1 attempt(s) so far, oldest first (4 samples" in trajectory
    assert "Best so far: candidate #0 (initial, sampled 4 times)" in prompt


GOOD_CPP = 'extern "C" int maxcode_run(const DLTensor* i, int32_t ni, DLTensor* o, int32_t no, void* s) { return 0; }'


def ctx(prompt_tokens: int) -> PromptContext:
    return PromptContext(
        target_id="mylib.fused_chain", kind="function", reference_source="def fused_chain(x, bias):\n    return x + bias\n",
        fmt="native", lang="cpp", entry="maxcode_run",
        workloads=[{"name": "w0", "signature": "(f32[4096,1024]@cpu, f32[1024]@cpu)", "outputs": [[[4096, 1024], "float32"]]}],
        device={"name": "Test CPU", "cores": 2}, prompt_tokens=prompt_tokens,
    )


def long_state(n: int) -> SearchState:
    """n attempts: #2 is the best (correct, 3x); every other one is wrong with a long reason."""
    state = SearchState("mylib.fused_chain")
    for i in range(n):
        text = f"// attempt {i}\n{GOOD_CPP}\n"
        if i == 2:
            v = Verdict(f"c{i}", "faster", speedup=3.0, reference_s=3e-3, candidate_s=1e-3)
        else:
            v = Verdict(f"c{i}", "wrong", reasons=[f"output 0: attempt {i} differs " + "x" * 120])
        state.add(Proposal(CandidateSpec(Path(f"/tmp/a{i}.cpp"), "native", "cpp", text), "test"), v, i)
    return state


def listed(message: str) -> list[int]:
    trajectory = message.split("## Trajectory", 1)[1].split("\n## ", 1)[0]
    return [int(line.split()[0][1:]) for line in trajectory.splitlines() if line.startswith("#")]


def test_a_long_trajectory_is_cut_to_the_token_budget_oldest_first() -> None:
    state = long_state(30)
    parent = state.trajectory[5]
    parts = ("trajectory", "best")

    def message(budget: int) -> tuple[str, str]:
        req = build_request(ctx(budget), state, parent, "fix", parts, 0)
        return req.system, req.messages[0].content

    system, whole = message(10**6)
    assert listed(whole) == list(range(30)) and "not listed" not in whole
    full = estimate_tokens(system) + estimate_tokens(whole)
    budget = full - 600  # about half of the lines must go
    system, cut = message(budget)
    assert estimate_tokens(system) + estimate_tokens(cut) <= budget
    shown = listed(cut)
    kept = [i for i in shown if i not in (2, 5)]
    # the newest lines stay, the oldest go first; the best (#2) and the parent (#5) stay however old
    assert kept == list(range(30 - len(kept), 30)) and 0 < len(kept) < 28
    assert shown == sorted({2, 5, *kept})
    assert f"({30 - len(shown)} older attempt(s) not listed)" in cut
    # as few as needed: one more line would not have fitted
    assert estimate_tokens(system) + estimate_tokens(cut) + estimate_tokens("#29 from the reference: wrong - output 0: attempt 29 differs " + "x" * 98) > budget
    # the best-so-far's code and the parent's are never cut, even when nothing else is left
    system, bare = message(1)
    assert listed(bare) == [2, 5] and "// attempt 2" in bare and "// attempt 5" in bare and "## Your task now" in bare


def test_the_line_cap_still_holds_under_a_large_budget() -> None:
    state = long_state(TRAJECTORY_LINES + 5)
    message = build_request(ctx(10**7), state, None, "initial", ("trajectory",), 0).messages[0].content
    # at most the cap's lines: #2, the best, stays listed, and the oldest others make room
    assert listed(message) == [2, *range(6, TRAJECTORY_LINES + 5)]
    assert "(5 older attempt(s) not listed)" in message


def test_a_repeat_is_recorded_on_its_node_and_changes_nothing_else() -> None:
    state = long_state(3)
    best = state.best
    again = Proposal(CandidateSpec(Path("/tmp/other.cpp"), "native", "cpp", f"// attempt 2   \n{GOOD_CPP}  \n\n"), "test", parent=state.trajectory[0])
    node = state.add(again, Verdict("x", "wrong"), 7)
    assert node is best and node.samples == 2 and node.repeats == [again] and node.verdict.status == "faster"
    assert len(state.trajectory) == 3 and state.best is best
    other_lang = Proposal(CandidateSpec(Path("/tmp/a2.cu"), "native", "cuda", f"// attempt 2\n{GOOD_CPP}\n"), "test")
    assert state.add(other_lang, Verdict("y", "compile_error"), 8) is not best  # another language is another source


class CountingOracle:
    """Stands in for the oracle's batch path only: records what it is asked to run, and finds
    every candidate faster with a decided interval."""

    eval_key = "k"

    def __init__(self) -> None:
        self.config = type("Config", (), {"min_speedup": 1.05})()
        self.ran: list[str] = []

    def check(self, specs: list[CandidateSpec]) -> list[Verdict]:
        self.ran += [s.text for s in specs]
        return [Verdict(str(s.path), "faster", speedup=2.0, speedup_ci=[1.9, 2.1], reference_s=2e-3, candidate_s=1e-3) for s in specs]


def test_a_repeat_runs_again_only_when_its_verdict_was_too_noisy_to_decide() -> None:
    from contextlib import nullcontext

    from pytest_maxcode.search.loop import Judge, _evaluate

    state = SearchState("t")
    decided = state.add(Proposal(CandidateSpec(Path("/tmp/d.cpp"), "native", "cpp", "// decided\n"), "test"),
                        Verdict("d", "not_faster", speedup=0.5, speedup_ci=[0.48, 0.52], candidate_s=4e-3), 0)
    noisy = state.add(Proposal(CandidateSpec(Path("/tmp/n.cpp"), "native", "cpp", "// noisy\n"), "test"),
                      Verdict("n", "not_faster", speedup=1.0, speedup_ci=[0.5, 2.0], candidate_s=2e-3), 0)
    oracle, progress = CountingOracle(), []
    target = TargetInfo("t", "m", "f", Path("/tmp/m.py"), "function", "cpp")
    result = SearchResult(target, state, "")
    batch = [Proposal(CandidateSpec(Path(f"/tmp/{i}.cpp"), "native", "cpp", text), "test")
             for i, text in enumerate(["// decided  \n", "// noisy\n", "// noisy\n\n", "// new\n"])]
    verdicts = _evaluate(batch, state, Judge(target, oracle, None, None, nullcontext(), progress.append, result))
    assert oracle.ran == ["// noisy\n", "// new\n"]  # the decided repeat is not run; the noisy one once
    assert verdicts[0] is decided.verdict and verdicts[1] is verdicts[2] and verdicts[1].status == "faster"
    nodes = [state.add(p, v, 1) for p, v in zip(batch, verdicts)]
    state.remeasured(noisy, verdicts[1])
    assert nodes[:3] == [decided, noisy, noisy] and noisy.samples == 3 and state.best is noisy
    assert "evaluating 2 candidate(s), 1 earlier one(s) timed again (too noisy to decide), 3 repeat(s)" in progress[0]


def test_identical_replies_without_code_are_one_node_with_a_count_and_one_line() -> None:
    state = long_state(3)
    fails = [Proposal(None, "test", error=e, parent=state.trajectory[i % 2])
             for i, e in enumerate(["the reply has no fenced code block", "the reply  has no fenced code block\n",
                                    "the reply has no fenced code block", "the code does not define maxcode_run"])]
    nodes = [state.add(p, Verdict("", "format", reasons=[p.error or ""]), 5) for p in fails]
    # the same error text (whitespace aside) is one node, counted; another error is another node
    assert nodes[0] is nodes[1] is nodes[2] and nodes[3] is not nodes[0]
    assert nodes[0].samples == 3 and nodes[0].repeats == fails[1:3] and nodes[3].samples == 1
    assert len(state.trajectory) == 5 and state.find(Proposal(None, "test", error="the reply has no fenced code block")) is nodes[0]
    assert state.best is state.trajectory[2]  # a format failure never displaces the best
    message = build_request(ctx(10**6), state, None, "initial", ("trajectory",), 0).messages[0].content
    assert listed(message) == [0, 1, 2, 3, 4]
    lines = [line for line in message.split("## Trajectory", 1)[1].split("\n## ", 1)[0].splitlines() if line.startswith("#3 ")]
    assert lines == ["#3 from #0: format (sampled 3 times) - the reply has no fenced code block"]
    assert "5 attempt(s) so far, oldest first (7 samples" in message
