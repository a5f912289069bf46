"""This machine's drift between runs, learned from its own repeats (issue 14): a host that drifts
more than the default run spread allows gets wider intervals, never narrower ones."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.oracle import drift, stats
from pytest_maxcode.oracle.check import CheckConfig, Oracle, combined_blocks
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.session import _measurement


@pytest.fixture
def machine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine cache of the test's own: a drift learned here must not widen other tests' verdicts."""
    cache = tmp_path / "machine-cache"
    monkeypatch.setenv("MAXCODE_CACHE_DIR", str(cache))
    return cache


def _run(blocks: list[float], loaded: bool = False) -> Verdict:
    """A repeat's verdict as the oracle leaves it: its blocks and its noise."""
    v = Verdict("k.cpp", "faster", speedup=math.exp(sum(map(math.log, blocks)) / len(blocks)))
    v.diagnostics["blocks"] = [{"speedup": b, "used": True} for b in blocks]
    v.diagnostics["noise"] = {"blocks": len(blocks), "loaded": loaded}
    return v


def _campaign(run_sd: float, block_sd: float, n: int, seed: int = 1) -> list[Verdict]:
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        centre = 3.0 * math.exp(rng.gauss(0, run_sd))
        runs.append(_run([centre * math.exp(rng.gauss(0, block_sd)) for _ in range(3)]))
    return runs


def test_the_drift_is_the_runs_spread_less_what_their_blocks_explain() -> None:
    wide = drift.estimate_drift(_campaign(0.2, 0.02, 40))
    assert wide is not None and wide.runs == 40 and 0.15 < wide.spread < 0.25, wide
    # runs that differ only by their blocks' own noise: little or nothing is the run's
    still = drift.estimate_drift(_campaign(0.0, 0.1, 40))
    assert still is not None and still.spread < 0.05, still
    # too few runs in blocks, and loaded runs (they allow for 0.2 already), say nothing
    assert drift.estimate_drift(_campaign(0.2, 0.02, drift.MIN_RUNS - 1)) is None
    loaded = [_run([3.0, 3.1, 2.9], loaded=True) for _ in range(10)]
    assert drift.estimate_drift(loaded) is None
    one_block = [Verdict("k.cpp", "not_faster", speedup=1.0 + i / 10) for i in range(10)]
    assert drift.estimate_drift(one_block) is None


def test_a_learned_drift_only_ever_widens_and_the_largest_recent_one_holds(machine_cache: Path) -> None:
    assert drift.learned(machine_cache, "cpu") is None and drift.run_spread(machine_cache, "cpu") is None
    drift.remember_drift(machine_cache, "cpu", drift.Drift(0.04, 6))  # a quiet machine: the default stays
    assert drift.learned(machine_cache, "cpu") == 0.04 and drift.run_spread(machine_cache, "cpu") is None
    drift.remember_drift(machine_cache, "cpu", drift.Drift(0.17, 6))
    drift.remember_drift(machine_cache, "cpu", drift.Drift(0.12, 8))
    assert drift.run_spread(machine_cache, "cpu") == 0.17
    assert drift.run_spread(machine_cache, "cuda") is None  # kept per device
    for _ in range(drift.KEPT):
        drift.remember_drift(machine_cache, "cpu", drift.Drift(0.11, 5))
    assert drift.run_spread(machine_cache, "cpu") == 0.11  # only the recent estimates count
    assert "later verdicts on this machine allow for it" in drift.Drift(0.17, 6).line("cpu")
    assert "within the 11% every verdict allows for" in drift.Drift(0.04, 6).line("cpu")


def test_the_interval_allows_for_the_learned_drift() -> None:
    def blocks() -> list[Verdict]:
        return [Verdict("k.cpp", "faster", speedup=s, speedup_ci=[s * 0.95, s * 1.05], reasons=[f"{s}x clears 1.05"],
                        diagnostics={"workloads": {"default": {"rounds": 32}}}) for s in (1.9, 2.0, 2.1)]

    default = combined_blocks(blocks(), 1.05, device="cpu")
    wider = combined_blocks(blocks(), 1.05, device="cpu", learned_spread=0.3)
    narrower = combined_blocks(blocks(), 1.05, device="cpu", learned_spread=0.02)
    assert default.diagnostics["noise"]["run_spread"] == stats.QUIET_RUN_SPREAD and not default.diagnostics["noise"]["run_spread_learned"]
    assert wider.diagnostics["noise"]["run_spread"] == 0.3 and wider.diagnostics["noise"]["run_spread_learned"]
    assert wider.speedup_ci[0] < default.speedup_ci[0] and wider.speedup_ci[1] > default.speedup_ci[1]
    assert narrower.speedup_ci == default.speedup_ci  # never narrower than the default allows
    # the verdict and the report say why the interval is wider than the default rule's
    said = "the interval allows for this machine's drift between runs (about 35%, learned from its repeats"
    assert said in wider.reasons[0] and "drift" not in default.reasons[0] and "drift" not in narrower.reasons[0]
    assert any(n.startswith(said) for n in _measurement(wider).notes) and not _measurement(default).notes


def test_an_oracle_on_a_drifting_machine_uses_its_drift_and_keys_its_verdicts_by_it(tmp_path: Path, machine_cache: Path) -> None:
    ref = parse_reference(str(DATA / "chain" / "ref.py"))
    plain = Oracle(ref, CheckConfig(device="cpu"), tmp_path)
    plain.close()
    drift.remember_drift(machine_cache, "cpu", drift.Drift(0.16, 6))
    drifting = Oracle(ref, CheckConfig(device="cpu"), tmp_path)
    drifting.close()
    assert plain.config.run_spread is None and drifting.config.run_spread == 0.16
    assert drifting.eval_key != plain.eval_key  # a verdict quoted with the narrower interval is not reused
