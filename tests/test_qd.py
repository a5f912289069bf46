"""The quality-diversity strategy: one elite per technique cell, parents drawn across cells,
and a staged schedule that restricts what the prompt permits (and what is evaluated)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import llm_fakes
import pytest
import test_search_llm
from llm_fakes import code_reply
from test_search_llm import GOOD, SLOW, run_search
from test_strategies import ScriptedProposer

from pytest_maxcode import options
from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.prompts import user_message
from pytest_maxcode.search.state import Proposal, SearchState
from pytest_maxcode.search.strategies.qd import QDStrategy, Stage, cell_of, parse_stages
from pytest_maxcode.search.strategy import StrategyParams
from pytest_maxcode.search.techniques import tags
from pytest_maxcode.store import Store

chain_root = test_search_llm.chain_root
fake_openai = llm_fakes.fake_openai

PLAIN = "for (int i = 0; i < n; ++i) y[i] = x[i] * 2;"
THREADS = "#pragma omp parallel for\n" + PLAIN
SIMD = "#pragma omp simd\n" + PLAIN
BOTH = "#pragma omp parallel for simd\n#pragma omp simd\n" + PLAIN


def node(state: SearchState, code: str, speedup: float | None, critique: str = "[correct:below-roof] ...") -> Any:
    spec = CandidateSpec(Path(f"/dummy/c{len(state.trajectory)}.cpp"), "native", "cpp", code)
    status = "wrong" if speedup is None else ("faster" if speedup > 1.05 else "not_faster")
    v = Verdict(candidate=str(spec.path), status=status, speedup=speedup, candidate_s=1 / speedup if speedup else None,
                reference_s=1.0)
    n = state.add(Proposal(spec, "test"), v, 0)
    n.critique = critique if speedup is not None else "[wrong:formula] ..."
    return n


def test_tags_name_the_techniques_in_the_code() -> None:
    assert tags(PLAIN) == frozenset()
    assert tags(THREADS) == {"threads"}
    assert tags(BOTH) == {"threads", "vectorized"}


def test_the_archive_keeps_one_elite_per_cell() -> None:
    state = SearchState("t")
    qd = QDStrategy()
    qd.initialize(state, ScriptedProposer([]), StrategyParams(k=4))
    plain_slow, plain_fast = node(state, PLAIN, 1.1), node(state, PLAIN + "\n// v2", 1.6)
    threads = node(state, THREADS, 1.3)
    threads_worse = node(state, THREADS + "\n// v2", 1.2)
    memory_bound = node(state, THREADS + "\n// v3", 1.25, "[correct:memory-bound] near the roof")
    wrong = node(state, SIMD, None)
    qd.update([plain_slow, plain_fast, threads, threads_worse, memory_bound, wrong])
    assert qd.archive == {
        "loop / below-roof": plain_fast,
        "threads / below-roof": threads,
        "threads / memory-bound": memory_bound,
    }
    assert cell_of(wrong) == "vectorized / unmeasured" and "vectorized / unmeasured" not in qd.archive


def test_parents_are_drawn_across_the_cells() -> None:
    state = SearchState("t")
    qd = QDStrategy()
    qd.initialize(state, ScriptedProposer([]), StrategyParams(k=3))
    elites = [node(state, PLAIN, 1.5), node(state, THREADS, 1.2), node(state, SIMD, 1.1)]
    qd.update(elites)
    asks = qd._asks(10)
    assert sorted(a.parent.index for a in asks) == [0, 1, 2] and {a.mode for a in asks} == {"improve"}
    qd.params = StrategyParams(k=5)
    asks = qd._asks(10)
    # fewer cells than k: one fresh start may open a new cell, the rest spread over the cells
    assert len(asks) == 5 and asks[-1].parent is None
    assert {a.parent.index for a in asks[:-1]} == {0, 1, 2}


def test_the_stage_schedule_restricts_what_the_prompt_permits_and_what_is_evaluated() -> None:
    stages = parse_stages({"stages": [
        {"steps": 1, "techniques": ["loop"]},
        {"steps": 1, "techniques": ["loop", "threads"]},
        {"techniques": "any"},
    ]})
    world = ScriptedProposer(itertools.cycle(["ok"]))
    qd = QDStrategy(stages)
    state = SearchState("t")
    qd.initialize(state, world, StrategyParams(k=2))
    assert [a.permitted for a in qd._asks(2)] == [("loop",), ("loop",)]
    from pytest_maxcode.search.prompts import PromptContext

    ctx = PromptContext(target_id="t", kind="function", reference_source="def f(x): ...", fmt="native", lang="cpp",
                        entry="maxcode_run", workloads=[], device={"name": "cpu"}, atol=None, rtol=None)
    text = user_message(ctx, state, None, "initial", ("trajectory",), ("loop",))
    permitted = text.split("## Techniques permitted in this stage\n", 1)[1].split("\n\n## Your task now", 1)[0]
    assert permitted.startswith("Use only:\n- loop: loop-level changes")
    barred = permitted.split("Not permitted now", 1)[1]
    assert "- threads:" in barred and "- vectorized:" in barred
    # stage 1 sends a threaded proposal to no one: it becomes a format failure saying why
    spec = CandidateSpec(Path("/dummy/x.cpp"), "native", "cpp", THREADS)
    kept = qd._keep([Proposal(spec, "test"), Proposal(CandidateSpec(Path("/dummy/y.cpp"), "native", "cpp", PLAIN), "test")], 2)
    assert kept[0].spec is None and kept[0].error == "uses threads, not permitted in stage 1 (permitted: loop)"
    assert kept[1].spec is not None
    qd.steps = 1
    assert qd._asks(1)[0].permitted == ("loop", "threads")
    assert qd._keep([Proposal(spec, "test")], 1)[0].spec is not None
    qd.steps = 2
    assert qd._asks(1)[0].permitted is None and qd.stage() == Stage(None, None)


def test_stages_per_target_and_clear_errors() -> None:
    config = {"stages": [{"techniques": "any"}],
              "targets": {"lib.soft*": {"stages": [{"steps": 3, "techniques": ["threads"]}, {"techniques": "any"}]}}}
    assert parse_stages(config, "lib.softmax")[0] == Stage(frozenset({"loop", "threads"}), 3)
    assert parse_stages(config, "lib.chain") == [Stage(None, None)]
    with pytest.raises(ValueError, match=r"stage 1: unknown technique 'simd' \(known: loop, tiling"):
        parse_stages({"stages": [{"techniques": ["simd"]}]})
    with pytest.raises(ValueError, match="stage 1 needs steps"):
        parse_stages({"stages": [{"techniques": ["loop"]}, {"techniques": "any"}]})
    with pytest.raises(ValueError, match=r"\[tool.maxcode.qd\] has no setting 'stage'"):
        parse_stages({"stage": []})


def test_a_bad_schedule_in_pyproject_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode.qd]\nstages = [{steps = 0, techniques = ["loop"]}]\n')
    with pytest.raises(ValueError, match=r"^\[tool.maxcode.qd\] stages: stage 1 steps must be a positive integer, not 0$"):
        options.load_settings({}, tmp_path / "pyproject.toml")


def test_a_staged_qd_search_through_the_model(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    """Stage 1 permits loop-level changes only: the model's vectorized kernel is turned away
    unevaluated, the plain one is run; stage 2 permits anything and the fast kernel wins. A third
    step repeats both kernels: not evaluated again, unless the fast one's verdict was too noisy
    to decide (a loaded CI runner), which the search times again as it would for a user."""
    replies = itertools.cycle([code_reply(GOOD), code_reply(SLOW)])
    fake_openai.respond_with(lambda body: next(replies))
    qd = {"stages": [{"steps": 1, "techniques": ["loop"]}, {"techniques": "any"}]}
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec(), strategy="qd", qd=qd, k=2, depth=3, budget=6)
        nodes = store.nodes("lib.chain")
    assert result.error is None, result.error
    first_prompts = [m["messages"][-1]["content"] for m in fake_openai.requests[:2]]
    assert all("## Techniques permitted in this stage\nUse only:\n- loop:" in p for p in first_prompts)
    later = [m["messages"][-1]["content"] for m in fake_openai.requests[2:]]
    assert later and not any("## Techniques permitted" in p for p in later)
    step0 = [n for n in nodes if n["step"] == 0]
    assert sorted(n["status"] for n in step0) == ["format", "not_faster"]
    turned_away = next(n for n in step0 if n["status"] == "format")
    assert turned_away["reasons"][0].startswith("uses vectorized, not permitted in stage 1 (permitted: loop)")
    seen = [(n.step, n.verdict.status, n.verdict.speedup_ci, n.verdict.reasons, len(n.repeats)) for n in result.state.trajectory]
    assert result.state.best.verdict.status == "faster" and result.state.best.step == 1, seen
    assert len(fake_openai.requests) == 6 and len(result.state.trajectory) == 3, seen
