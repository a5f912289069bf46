"""Stored verdicts are evidence, not facts: a verdict too noisy to decide is timed again rather
than reused, ``--maxcode-remeasure`` times every stored candidate again, and a decided verdict
is reused as before (a resumed run repeats no finished evaluation)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import UNDECIDED_WIDTH, Verdict, undecided
from pytest_maxcode.search.loop import Judge, SearchResult, _evaluate, reusable
from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.search.state import Proposal, SearchState
from pytest_maxcode.store import Store
from pytest_maxcode.store.sqlite import default_path


def _row(status: str, ci: list[float] | None, **diagnostics: object) -> dict:
    return {"status": status, "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None, "diagnostics": diagnostics}


def test_what_counts_as_undecided() -> None:
    assert undecided("not_faster", [0.26, 4.65], 1.05)  # the 1.04x [0.26, 4.65]
    assert not undecided("not_faster", [0.97, 1.02], 1.05)  # narrow: decided, not faster
    assert not undecided("not_faster", [0.1, 0.9], 1.05)  # wide, but below the bar all along
    assert not undecided("faster", [1.1, 9.0], 1.05)  # a faster verdict is decided (and confirmed)
    assert not undecided("wrong", None, 1.05)
    low = 0.9
    assert not undecided("not_faster", [low, low * UNDECIDED_WIDTH], 1.05)  # the threshold itself is decided
    assert undecided("not_faster", [low, low * UNDECIDED_WIDTH * 1.01], 1.05)


def test_which_stored_rows_are_reused() -> None:
    assert reusable(_row("not_faster", [0.97, 1.02]), 1.05, remeasure=False)
    assert reusable(_row("faster", [1.4, 1.6]), 1.05, remeasure=False)
    assert reusable(_row("compile_error", None), 1.05, remeasure=False)
    assert not reusable(_row("not_faster", [0.26, 4.65]), 1.05, remeasure=False)
    assert not reusable(_row("not_faster", [0.97, 1.02], undecided=True), 1.05, remeasure=False)  # the oracle's own flag
    assert not reusable(_row("faster", [1.4, 1.6]), 1.05, remeasure=True)
    assert not reusable(_row("compile_error", None), 1.05, remeasure=True)


@pytest.fixture
def oracle(project: Path):
    os.chdir(project)
    with Store(default_path(project)) as store:
        with Oracle(parse_reference("ref.py"), CheckConfig(time_budget=0.05, timeout=60), project, store=store) as o:
            yield o, store


def _stored(store: Store, oracle: Oracle, spec: CandidateSpec, status: str, ci: list[float]) -> None:
    v = Verdict(str(spec.path), status, speedup=(ci[0] * ci[1]) ** 0.5, speedup_ci=ci, hash=spec.hash, format="native", lang="cpp",
                reasons=["stored"])
    store.upsert_target(oracle.reference.target_id, "module", str(oracle.reference.path), oracle.reference.source_hash())
    store.add_candidate(spec.hash, spec.format, spec.lang, spec.text, origin="test")
    store.record_evaluation(run_id=None, target_id=oracle.reference.target_id, config_key=oracle.eval_key, device="cpu", verdict=v.to_json())


def _evaluate_once(oracle: Oracle, store: Store, project: Path, remeasure: bool) -> tuple[Verdict, SearchResult]:
    spec = CandidateSpec.from_path("good.cpp")
    target = TargetInfo(oracle.reference.target_id, "ref", "Model", project / "ref.py", "module")
    result = SearchResult(target, SearchState(target.id), "")
    judge = Judge(target, oracle, store, None, contextlib.nullcontext(), print, result, remeasure)
    (v,) = _evaluate([Proposal(spec, "seed")], result.state, judge)
    return v, result


def test_a_decided_verdict_is_reused_an_undecided_one_and_remeasure_are_timed_again(oracle, project: Path) -> None:
    o, store = oracle
    spec = CandidateSpec.from_path("good.cpp")
    _stored(store, o, spec, "not_faster", [0.98, 1.03])
    v, result = _evaluate_once(o, store, project, remeasure=False)
    assert result.resumed == 1 and v.diagnostics.get("resumed") and v.reasons == ["stored"]

    v, result = _evaluate_once(o, store, project, remeasure=True)
    assert result.resumed == 0 and not v.diagnostics.get("resumed") and v.reasons != ["stored"] and v.correct

    _stored(store, o, spec, "not_faster", [0.26, 4.65])  # now the latest stored verdict: undecided
    v, result = _evaluate_once(o, store, project, remeasure=False)
    assert result.resumed == 0 and not v.diagnostics.get("resumed") and v.reasons != ["stored"] and v.correct


def test_a_forged_faster_row_with_the_largest_rowid_is_not_what_a_resumed_run_reuses(oracle, project: Path) -> None:
    import sqlite3

    o, store = oracle
    spec = CandidateSpec.from_path("good.cpp")
    _stored(store, o, spec, "not_faster", [0.98, 1.03])
    db = sqlite3.connect(str(store.path))
    db.execute(
        "INSERT INTO evaluations(id, target_id, candidate_hash, config_key, status, speedup, ci_low, ci_high, device, "
        "reasons, created_at) VALUES (1000000, ?, ?, ?, 'faster', 50.0, 45.0, 55.0, 'cpu', '[\"forged\"]', 'now')",
        (o.reference.target_id, spec.hash, o.eval_key),
    )
    db.commit()
    db.close()
    v, result = _evaluate_once(o, store, project, remeasure=False)
    assert result.resumed == 1 and v.status == "not_faster" and v.reasons == ["stored"]


def test_a_verdict_from_a_weaker_sandbox_than_auto_gives_now_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 13: a run where auto fell back (no bubblewrap on that runner) recorded its verdicts
    # in a store its candidates could reach; a later run with bubblewrap must not reuse them
    from pytest_maxcode.sandbox import isolation

    strongest = isolation.STRONGEST_FIRST[0]
    monkeypatch.setattr(isolation, "resolve", lambda requested="auto": isolation._isolation(strongest, ""))
    with_bwrap = CheckConfig().key()
    assert with_bwrap == CheckConfig(sandbox=strongest).key()  # auto that found bwrap is bwrap
    assert with_bwrap != CheckConfig(sandbox="unshare").key() != CheckConfig(sandbox="none").key()
    for weaker in ("unshare", "none"):
        monkeypatch.setattr(isolation, "resolve", lambda requested="auto", kind=weaker: isolation._isolation(kind, "fell back"))
        assert CheckConfig().key() == CheckConfig(sandbox=weaker).key() != with_bwrap
