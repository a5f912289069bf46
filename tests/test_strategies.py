"""The search strategies against a scripted policy and a scripted oracle: no LLM, no build.

A ``ScriptedProposer`` turns each ``Ask`` into a candidate whose text encodes its outcome
("ok", "slow", "wrong", "compile_error", ...) and its time; ``evaluate`` reads the verdict
back from the text. "ok" is 0.8x the time of the nearest correct ancestor (the reference,
1.0 s, when there is none), "slow" 1.25x. ``drive`` mimics the search loop.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.reward import TIERS, discounted_max, reward
from pytest_maxcode.search.state import Node, Proposal, SearchState, rank
from pytest_maxcode.search.strategies import (
    STRATEGIES,
    BeamStrategy,
    BestOfNStrategy,
    EffiStrategy,
    MaxcodeStrategy,
    RefineStrategy,
    make_strategy,
)
from pytest_maxcode.search.strategy import Ask, StrategyParams

NO_MORE = "the policy has no more candidates"


def base_time(node: Node | None) -> float:
    while node is not None:
        if node.verdict.correct:
            return node.verdict.candidate_s
        node = node.parent
    return 1.0


class ScriptedProposer:
    """Answers each ask with the next outcome of its script; stops when the script ends."""

    name = "scripted"

    def __init__(self, script: Iterable[str]) -> None:
        self.script = iter(script)
        self.calls: list[list[Ask]] = []
        self.made = 0

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        self.calls.append(list(asks))
        out = []
        for ask in asks:
            outcome = next(self.script, None)
            if outcome is None:
                break
            out.append(self._make(ask, outcome))
        return out

    def _make(self, ask: Ask, outcome: str) -> Proposal:
        i, self.made = self.made, self.made + 1
        pid = ask.parent.index if ask.parent is not None else None
        if outcome == "format":
            p = Proposal(None, "scripted", {"id": i}, error="no code block in the reply")
        else:
            t = base_time(ask.parent) * {"ok": 0.8, "slow": 1.25}.get(outcome, 1.0)
            text = f"// id={i} outcome={outcome} t={t!r} parent={pid}\n"
            p = Proposal(CandidateSpec(Path(f"/dummy/c{i}.cpp"), "native", "cpp", text), "scripted", {"id": i})
        p.parent, p.mode = ask.parent, ask.mode
        return p


def evaluate(p: Proposal) -> Verdict:
    if p.spec is None:
        return Verdict(candidate="", status="format")
    m = re.search(r"outcome=(\w+) t=(\S+)", p.spec.text)
    assert m
    outcome, t = m.group(1), float(m.group(2))
    kw = {"candidate": str(p.spec.path), "format": "native", "lang": "cpp"}
    if outcome in ("ok", "slow"):
        s = 1.0 / t
        return Verdict(status="faster" if s > 1 else "not_faster", speedup=s, reference_s=1.0, candidate_s=t, **kw)
    return Verdict(status=outcome, **kw)


class Run:
    def __init__(self, state: SearchState, reason: str, batches: list[list[Node]], ns: list[int], asked: list[int]):
        self.state, self.reason, self.batches, self.ns, self.asked = state, reason, batches, ns, asked

    @property
    def nodes(self) -> list[Node]:
        return self.state.trajectory


def drive(strategy, proposer: ScriptedProposer, params: StrategyParams, budget: int = 100) -> Run:
    """The loop: budgets and should_stop, propose(n), evaluate, state.add, update."""
    state = SearchState("t")
    strategy.initialize(state, proposer, params)
    used = step = 0
    batches: list[list[Node]] = []
    ns: list[int] = []
    asked: list[int] = []
    while True:
        if used >= budget:
            reason = "budget"
            break
        why = strategy.should_stop()
        if why is not None:
            reason = why
            break
        n = budget - used
        before = len(proposer.calls)
        batch = strategy.propose(n)
        asked.append(sum(len(c) for c in proposer.calls[before:]))
        assert len(batch) <= n, f"{strategy.name} returned {len(batch)} proposals with room for {n}"
        if not batch:
            reason = strategy.should_stop() or "empty batch"
            break
        nodes = [state.add(p, evaluate(p), step) for p in batch]
        ns.append(n)
        batches.append(nodes)
        used += len(batch)
        step += 1
        strategy.update(nodes)
    assert used <= budget
    return Run(state, reason, batches, ns, asked)


def summary(calls: list[list[Ask]]) -> list[list[tuple[int | None, str, str | None]]]:
    return [[(a.parent.index if a.parent else None, a.mode, a.observation) for a in c] for c in calls]


def parents(run: Run) -> list[int | None]:
    return [x.parent.index if x.parent else None for x in run.nodes]


def t(node: Node) -> float:
    return node.verdict.candidate_s


# ---------------------------------------------------------------- registry


def test_registry_and_make_strategy():
    assert set(STRATEGIES) == {"sweep", "best-of-n", "refine", "effi", "maxcode", "beam", "qd"}
    for name in STRATEGIES:
        s = make_strategy(name)
        assert s.name == name
        assert make_strategy(name) is not s
        assert __import__(type(s).__module__, fromlist=["_"]).__doc__  # says what it reproduces


def test_unknown_strategy_name():
    with pytest.raises(ValueError) as e:
        make_strategy("greedy")
    msg = str(e.value)
    assert "greedy" in msg and "\n" not in msg
    for name in STRATEGIES:
        assert name in msg


# ---------------------------------------------------------------- best-of-n


def test_best_of_n_all_roots_and_budget():
    prop = ScriptedProposer(itertools.cycle(["wrong", "ok", "compile_error", "slow", "format"]))
    run = drive(BestOfNStrategy(), prop, StrategyParams(k=3), budget=7)
    assert [len(b) for b in run.batches] == [3, 3, 1]
    assert run.reason == "budget"
    assert all(x.parent is None and x.depth == 0 and x.proposal.mode == "initial" for x in run.nodes)
    assert all(a == Ask() for c in prop.calls for a in c)
    assert run.state.best.index == 1 and t(run.state.best) == pytest.approx(0.8)


def test_best_of_n_depth_and_exhaustion():
    run = drive(BestOfNStrategy(), ScriptedProposer(itertools.cycle(["ok"])), StrategyParams(k=2, depth=2))
    assert [len(b) for b in run.batches] == [2, 2]
    assert run.reason == "depth of 2 steps reached"
    run = drive(BestOfNStrategy(), ScriptedProposer(["wrong"] * 4), StrategyParams(k=3))
    assert [len(b) for b in run.batches] == [3, 1]
    assert run.reason == NO_MORE


# ---------------------------------------------------------------- refine


def test_refine_chain_with_fixups():
    prop = ScriptedProposer(["ok", "compile_error", "ok", "wrong", "wrong", "compile_error", "ok"])
    run = drive(RefineStrategy(), prop, StrategyParams(k=1))
    fix = "feedback+trajectory"
    assert summary(prop.calls) == [
        [(None, "initial", None)],
        [(0, "improve", None)],
        [(1, "fix", fix)],  # the failed node is the fix-up's parent
        [(2, "improve", None)],  # the fastest valid so far
        [(3, "fix", fix)],
        [(4, "fix", fix)],  # two fix-ups of one lineage at most ...
        [(2, "improve", None)],  # ... then back to improving the best
        [(6, "improve", None)],  # the script has ended here
    ]
    assert parents(run) == [None, 0, 1, 2, 3, 4, 2]
    assert run.reason == NO_MORE
    best = run.state.best
    assert best.index == 6 and t(best) == pytest.approx(0.512) and best.depth == 3


def test_refine_restarts_from_reference_without_correct_node():
    prop = ScriptedProposer(["compile_error", "wrong", "wrong", "compile_error", "ok"])
    run = drive(RefineStrategy(), prop, StrategyParams(k=1))
    modes = [(c[0].parent.index if c[0].parent else None, c[0].mode) for c in prop.calls]
    assert modes == [(None, "initial"), (0, "fix"), (1, "fix"), (None, "initial"), (3, "fix"), (4, "improve")]
    assert run.state.best.index == 4 and run.state.best.verdict.correct


def test_refine_format_failure_is_not_fixed():
    prop = ScriptedProposer(["format", "ok"])
    drive(RefineStrategy(), prop, StrategyParams(k=1))
    assert summary(prop.calls) == [[(None, "initial", None)], [(None, "initial", None)], [(1, "improve", None)]]


def test_refine_samples_per_round_and_budget_cap():
    prop = ScriptedProposer(["wrong", "ok", "wrong", "compile_error", "ok"])
    run = drive(RefineStrategy(), prop, StrategyParams(k=2), budget=5)
    assert [len(b) for b in run.batches] == [2, 2, 1]
    s = summary(prop.calls)
    assert s[0] == [(None, "initial", None)] * 2
    assert s[1] == [(1, "improve", None)] * 2
    # no correct in round 1: fix its most promising failure (wrong beats compile_error)
    assert s[2] == [(2, "fix", "feedback+trajectory")]
    assert run.reason == "budget"


def test_refine_depth():
    run = drive(RefineStrategy(), ScriptedProposer(itertools.cycle(["ok"])), StrategyParams(k=1, depth=3))
    assert len(run.nodes) == 3 and run.reason == "depth of 3 steps reached"
    assert parents(run) == [None, 0, 1]


# ---------------------------------------------------------------- effi


def test_effi_keeps_only_improvements():
    script = ["wrong", "compile_error"]  # round 0: nothing correct
    script += ["wrong", "ok"]  # round 1: n3 (0.8) becomes current
    script += ["slow", "compile_error"]  # round 2: discarded
    script += ["ok", "slow"]  # round 3: n6 (0.64) becomes current
    script += ["slow", "ok"]  # round 4: n8 (0.8, faster than the reference, slower than current); n9 (0.512)
    script += ["slow", "slow"]  # round 5: both discarded
    prop = ScriptedProposer(script)
    strat = EffiStrategy()
    currents = []
    orig = strat.update

    def update(nodes):
        orig(nodes)
        currents.append(strat.current.index if strat.current else None)

    strat.update = update
    run = drive(strat, prop, StrategyParams(k=2))
    assert currents == [None, 3, 3, 6, 9, 9]
    s = summary(prop.calls)
    assert s[:2] == [[(None, "initial", None)] * 2] * 2
    assert s[2:] == [[(p, "improve", "feedback")] * 2 for p in (3, 3, 6, 9, 9)]
    assert run.nodes[8].verdict.status == "faster"  # faster than the reference, still discarded
    used_as_parent = {x.parent.index for x in run.nodes if x.parent}
    assert used_as_parent == {3, 6, 9}
    assert not used_as_parent & {4, 5, 7, 8, 10, 11}
    assert strat.best() is run.nodes[9] and t(strat.best()) == pytest.approx(0.512)
    assert run.reason == NO_MORE


def test_effi_best_before_any_correct_and_depth():
    strat = EffiStrategy()
    run = drive(strat, ScriptedProposer(itertools.cycle(["wrong", "compile_error"])), StrategyParams(k=2, depth=2))
    assert strat.current is None and strat.best() is run.state.best
    assert run.reason == "depth of 2 steps reached" and len(run.nodes) == 4
    assert all(x.parent is None for x in run.nodes)


# ---------------------------------------------------------------- maxcode


def test_maxcode_builds_on_best_so_far_until_depth():
    script = ["wrong", "ok", "slow", "ok", "compile_error", "slow", "wrong", "wrong", "ok"]
    prop = ScriptedProposer(itertools.chain(script, itertools.repeat("ok")))
    run = drive(MaxcodeStrategy(), prop, StrategyParams(k=3, depth=3))
    assert run.reason == "depth of 3 steps reached"
    assert [len(b) for b in run.batches] == [3, 3, 3]
    start = 0
    for batch, call in zip(run.batches, prop.calls):
        earlier = run.nodes[:start]
        top = max(earlier, key=rank) if earlier else None
        want = top if top is not None and top.verdict.correct else None
        assert all(a.parent is want and a.observation is None for a in call)
        assert all(a.mode == ("improve" if want else "initial") for a in call)
        assert all(x.parent is want for x in batch)
        start += len(batch)
    assert parents(run) == [None] * 3 + [1] * 3 + [3] * 3
    assert run.state.best.index == 8 and t(run.state.best) == pytest.approx(0.512)


def test_maxcode_initial_until_correct_and_budget_cap():
    prop = ScriptedProposer(itertools.chain(["wrong"] * 3, itertools.repeat("ok")))
    run = drive(MaxcodeStrategy(), prop, StrategyParams(k=3), budget=7)
    assert [len(b) for b in run.batches] == [3, 3, 1]
    assert run.asked == [3, 3, 1]
    s = summary(prop.calls)
    assert s[1] == [(None, "initial", None)] * 3
    assert s[2] == [(3, "improve", None)]  # the first of equals


def test_maxcode_rerank_filters_what_is_sent():
    def keep_best_ok(ps: list[Proposal]) -> list[Proposal]:
        return [p for p in ps if p.spec is not None and "outcome=ok" in p.spec.text][:1]

    strat = MaxcodeStrategy(rerank=keep_best_ok)
    prop = ScriptedProposer(["wrong", "ok", "compile_error", "format", "ok", "slow"])
    run = drive(strat, prop, StrategyParams(k=3, depth=2))
    assert [len(c) for c in prop.calls] == [3, 3]  # k asked each step
    assert [len(b) for b in run.batches] == [1, 1]  # only the reranked one sent
    assert all("outcome=ok" in x.code for x in run.nodes)
    assert run.nodes[1].parent is run.nodes[0]
    assert run.reason == "depth of 2 steps reached"


def test_maxcode_rerank_respects_n_and_empty_rerank_stops():
    strat = MaxcodeStrategy(rerank=lambda ps: list(reversed(ps)))
    run = drive(strat, ScriptedProposer(itertools.repeat("ok")), StrategyParams(k=4), budget=6)
    assert [len(b) for b in run.batches] == [4, 2]
    assert run.asked == [4, 4]
    strat = MaxcodeStrategy(rerank=lambda ps: [])
    run = drive(strat, ScriptedProposer(itertools.repeat("ok")), StrategyParams(k=4))
    assert run.nodes == [] and run.reason == "the value model kept none of the proposals"


# ---------------------------------------------------------------- beam


def beam_of(nodes: list[Node], w: int) -> list[Node]:
    pool = [x for x in nodes if x.verdict.status not in ("format", "rejected")]
    return sorted(pool, key=rank, reverse=True)[:w]


def test_beam_tree_shape():
    script = ["ok", "wrong", "compile_error", "format"]  # step 0
    script += ["ok", "slow", "ok", "wrong"]  # step 1: 2 children of n0 (improve), 2 of n1 (fix)
    script += ["ok", "wrong", "slow", "ok"]  # step 2: beam is n4 (0.64) and n0 (0.8, ties n6: earliest)
    prop = ScriptedProposer(itertools.chain(script, itertools.repeat("ok")))
    w, k = 2, 4
    run = drive(BeamStrategy(), prop, StrategyParams(k=k, width=w, depth=3))
    assert run.reason == "depth of 3 steps reached"
    assert [len(b) for b in run.batches] == [4, 4, 4]
    assert all(x.parent is None for x in run.batches[0])
    start = len(run.batches[0])
    for batch in run.batches[1:]:
        beam = beam_of(run.nodes[:start], w)
        ps = [x.parent for x in batch]
        assert len({id(p) for p in ps}) <= w
        for b in beam:
            kids = [x for x in batch if x.parent is b]
            assert len(kids) == k // w
            assert all(x.proposal.mode == ("improve" if b.verdict.correct else "fix") for x in kids)
        start += len(batch)
    s = summary(prop.calls)
    assert s[1] == [(0, "improve", None)] * 2 + [(1, "fix", None)] * 2
    assert s[2] == [(4, "improve", None)] * 2 + [(0, "improve", None)] * 2
    assert run.state.best.index == 8 and t(run.state.best) == pytest.approx(0.512)


def test_beam_budget_cap_and_exhaustion():
    prop = ScriptedProposer(["ok", "wrong", "compile_error", "format", "ok", "ok", "ok"])
    run = drive(BeamStrategy(), prop, StrategyParams(k=4, width=2), budget=7)
    assert [len(b) for b in run.batches] == [4, 3]
    assert summary(prop.calls)[1] == [(0, "improve", None)] * 2 + [(1, "fix", None)]
    prop = ScriptedProposer(["ok", "wrong", "ok", "ok", "slow"])
    run = drive(BeamStrategy(), prop, StrategyParams(k=4, width=2))
    assert [len(b) for b in run.batches] == [4, 1] and run.reason == NO_MORE


def test_beam_skips_unbuildable_and_odd_widths():
    prop = ScriptedProposer(itertools.chain(["format", "format", "ok", "format"], itertools.repeat("wrong")))
    drive(BeamStrategy(), prop, StrategyParams(k=4, width=2, depth=2))
    # the three identical "format" replies are one node (#0), so the buildable one is #1
    assert summary(prop.calls)[1] == [(1, "improve", None)] * 2
    prop = ScriptedProposer(itertools.repeat("format"))
    drive(BeamStrategy(), prop, StrategyParams(k=4, width=2, depth=2))
    assert summary(prop.calls)[1] == [(None, "initial", None)] * 4  # nothing to build on
    prop = ScriptedProposer(itertools.repeat("ok"))
    run = drive(BeamStrategy(), prop, StrategyParams(k=1, width=3, depth=3))
    # max(1, k // w) children per beam node (so more than k while the beam is wider than k)
    assert [len(b) for b in run.batches] == [1, 1, 2]
    assert parents(run) == [None, 0, 1, 0]


# ---------------------------------------------------------------- every strategy


def _world() -> ScriptedProposer:
    return ScriptedProposer(itertools.cycle(["ok", "wrong", "compile_error", "slow", "format", "runtime_error"]))


@pytest.mark.parametrize("name", sorted(STRATEGIES) + ["maxcode+rerank"])
@pytest.mark.parametrize("budget", [1, 3, 5, 10])
def test_budget_never_exceeded(name: str, budget: int):
    if name == "maxcode+rerank":
        strat = MaxcodeStrategy(rerank=lambda ps: ps[::-1])
    else:
        strat = make_strategy(name)
    run = drive(strat, _world(), StrategyParams(k=4, width=2), budget=budget)
    assert sum(len(b) for b in run.batches) == budget and run.reason == "budget"
    assert all(len(b) <= n for b, n in zip(run.batches, run.ns))
    if name != "maxcode+rerank":  # a reranker is asked for k and filters; the others ask at most n
        assert all(a <= n for a, n in zip(run.asked, run.ns))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_exhausted_policy_stops_every_strategy(name: str):
    run = drive(make_strategy(name), ScriptedProposer([]), StrategyParams(k=4))
    assert run.nodes == [] and run.reason == NO_MORE


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - {"sweep"}))
def test_depth_reason_is_plain(name: str):
    run = drive(make_strategy(name), _world(), StrategyParams(k=2, depth=1))
    assert run.reason == "depth of 1 step reached" and len(run.batches) == 1


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - {"sweep", "best-of-n"}))
def test_search_strategies_beat_independent_sampling(name: str):
    """In this world "ok" compounds along a lineage, so building on results must win."""
    world = lambda: ScriptedProposer(itertools.cycle(["ok", "wrong", "slow", "compile_error"]))
    base = drive(make_strategy("best-of-n"), world(), StrategyParams(k=2), budget=16)
    run = drive(make_strategy(name), world(), StrategyParams(k=2, width=2), budget=16)
    assert t(base.state.best) == pytest.approx(0.8)
    assert t(run.state.best) < 0.8 * 0.8 + 1e-9


# ---------------------------------------------------------------- reward


def _v(status: str, speedup: float | None = None) -> Verdict:
    return Verdict(candidate="c", status=status, speedup=speedup)


def test_reward_tiers_order():
    ladder = [
        [_v("format"), _v("rejected")],
        [_v("compile_error")],
        [_v("runtime_error"), _v("crash"), _v("timeout")],
        [_v("wrong")],
        [_v("not_faster", 0.5), _v("not_faster", None), _v("faster", 2.0)],
    ]
    rs = [[reward(v) for v in tier] for tier in ladder]
    for lower, higher in itertools.pairwise(rs):
        assert max(lower) < min(higher)
    for tier in rs[:-1]:
        assert len(set(tier)) == 1
    assert all(r > 0 for r in rs[-1])
    assert reward(_v("faster", 2.0)) == 2.0 and reward(_v("not_faster", 0.5)) == 0.5
    assert set(TIERS) | {"faster", "not_faster"} == {
        "format", "rejected", "compile_error", "runtime_error", "crash", "timeout", "wrong", "faster", "not_faster"
    }


def test_a_weak_check_is_paid_no_more_than_a_correct_but_not_faster_verdict():
    """Timed calls that reuse the known input sets let a kernel cache its answers: its speedup is no evidence."""
    reason = "weak check: the timed calls reuse 3 known input set(s) (the reference rejects some generated ones)"
    strong = Verdict(candidate="c", status="faster", speedup=4.0)
    weak = Verdict(candidate="c", status="faster", speedup=4.0, weak_check=True, reasons=[reason])
    assert reward(strong) == 4.0
    assert reward(weak) == 1.0 == max(reward(_v("not_faster", 1.0)), reward(_v("not_faster", 0.5)))
    slow_weak = Verdict(candidate="c", status="not_faster", speedup=0.5, weak_check=True)
    assert reward(slow_weak) == reward(_v("not_faster", 0.5)) == 0.5  # a slow one keeps its (lower) speedup
    assert reward(Verdict(candidate="c", status="wrong", weak_check=True)) == TIERS["wrong"]


def test_discounted_max():
    assert discounted_max([0.5, 2.0, 1.0], 0.9) == pytest.approx(1.8)  # the max, not the sum
    assert discounted_max([3.0, 2.0], 1.0) == 3.0
    assert discounted_max([-1.0, -0.25], 0.5) == pytest.approx(-0.125)
    assert discounted_max([], 0.9) == float("-inf")
