"""Inputs: calls that raised are not captured, and generated input sets stay inside the value
domain of the captured ones, so a reference that rejects part of its type's range still runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import pytest_maxcode as maxcode
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import ReferenceSpec
from pytest_maxcode.oracle.remote._maxcode_worker import _random_like
from pytest_maxcode.targets.capture import Recorder


@maxcode.optimize
def checked_log(x: torch.Tensor) -> torch.Tensor:
    if (x <= 0).any():
        raise ValueError("checked_log: x must be positive")
    return torch.log(x)


def test_a_call_that_raised_is_not_captured() -> None:
    recorder = Recorder()
    recorder.attach(checked_log.maxcode)
    try:
        recorder.current_test = "test_x.py::test_rejects"
        with pytest.raises(ValueError):
            checked_log(-torch.ones(8))  # the sign the reference rejects
        with pytest.raises(ValueError):
            checked_log(torch.zeros(4, 4))  # its own signature, never captured
        recorder.current_test = "test_x.py::test_accepts"
        good = torch.rand(8) + 0.5
        torch.testing.assert_close(checked_log(good), torch.log(good))
    finally:
        checked_log.maxcode.use_reference("test over")
    cap = recorder.targets[checked_log.maxcode.id]
    assert cap.calls == 3
    assert cap.callers == ["test_x.py::test_rejects", "test_x.py::test_accepts"]  # callers still re-verify
    assert list(cap.workloads) == ["float32[8]@cpu"]
    (sets,) = [w.sets for w in cap.workloads.values()]
    assert len(sets) == 1 and torch.equal(sets[0][0], good)
    assert cap.skipped == {"the call raised an exception": 2}


def test_an_inplace_call_is_captured_as_it_was_before_the_call() -> None:
    @maxcode.optimize(inplace=True)
    def double_(x: torch.Tensor) -> None:
        x.mul_(2)

    recorder = Recorder()
    recorder.attach(double_.maxcode)
    x = torch.ones(3)
    double_(x)
    (w,) = recorder.targets[double_.maxcode.id].workloads.values()
    assert torch.equal(w.sets[0][0], torch.ones(3)) and torch.equal(x, torch.full((3,), 2.0))


def _generated(values: list, seeds: range = range(20)) -> list[list]:
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(_random_like(values))
    return out


def test_generated_values_stay_inside_the_captured_domain() -> None:
    torch.manual_seed(123)
    positive = torch.rand(64, 32) * 5 + 0.01  # log's domain: all positive
    unit = torch.rand(256) * 2 - 1  # acos's domain: [-1, 1]
    counts = torch.randint(0, 7, (128,)).float()  # integers stored as floats
    levels = torch.tensor([0.5, 2.0]).repeat(50)  # two values only
    index = torch.randint(3, 9, (40,))
    mask = torch.tensor([True, False, False, True] * 8)
    half = (torch.rand(100) + 1).half()
    transposed = (torch.rand(16, 8) + 1).t()
    values = [positive, unit, counts, levels, index, mask, half, transposed, 3, 0.5, True]
    generated = _generated(values)
    for g in generated:
        p, u, c, lv, i, m, h, t, *scalars = g
        assert p.dtype == torch.float32 and p.shape == positive.shape
        assert p.min() >= positive.min() and p.max() <= positive.max()
        assert u.min() >= unit.min() and u.max() <= unit.max()
        assert torch.equal(c, c.round()) and set(c.unique().tolist()) <= set(counts.unique().tolist())
        assert set(lv.unique().tolist()) <= {0.5, 2.0}
        assert i.dtype == torch.int64 and set(i.unique().tolist()) <= set(index.unique().tolist())
        assert m.dtype == torch.bool and m.shape == mask.shape
        assert h.dtype == torch.float16 and h.min() >= half.min() and h.max() <= half.max()
        assert t.stride() == transposed.stride() and t.min() > 0
        assert scalars == [3, 0.5, True]
    # fresh values, not the captured ones again, and different per seed
    assert not torch.equal(generated[0][0], positive)
    assert not torch.equal(generated[0][0], generated[1][0])
    assert not torch.equal(generated[0][4], generated[1][4])


def test_a_constant_tensor_stays_constant() -> None:
    ones = torch.ones(10)
    for g in _generated([ones], range(3)):
        assert torch.equal(g[0], ones)


SAFE_LOG = '''
import torch


def safe_log(x):
    if (x <= 0).any():
        raise ValueError("safe_log: x must be positive")
    return torch.log(x)
'''

SAFE_LOG_CPP = r"""
#include <cmath>
#include <cstdint>
#include <dlpack/dlpack.h>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 1 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  int64_t n = 1;
  for (int i = 0; i < in[0].ndim; ++i) n *= in[0].shape[i];
  for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
  return 0;
}
"""


def test_a_reference_that_rejects_non_positive_input_is_checked_on_positive_inputs(tmp_path: Path) -> None:
    (tmp_path / "mylog.py").write_text(SAFE_LOG)
    captured = tmp_path / "captured.pt"
    torch.manual_seed(0)
    # what a test passes it: small positive values, where a Gaussian of the same mean and
    # standard deviation would go negative
    torch.save({"signature": "float32[4096]@cpu", "sets": [[torch.rand(4096) * 0.5 + 1e-3]]}, captured)
    (tmp_path / "log.cpp").write_text(SAFE_LOG_CPP)
    os.chdir(tmp_path)
    reference = ReferenceSpec("function", tmp_path / "mylog.py", "safe_log", module="mylog", rootdir=tmp_path)
    config = CheckConfig(time_budget=0.1, timeout=60, n_seeds=4)
    with Oracle(reference, config, tmp_path, workloads=[{"name": "w", "captured": str(captured)}]) as oracle:
        (workload,) = oracle.workloads
        assert len(workload.expected) == 1 + 4  # the captured set and four generated ones, all accepted
        (verdict,) = oracle.check([CandidateSpec.from_path(tmp_path / "log.cpp")])
    assert verdict.correct, verdict.reasons


PAIR = '''
import torch


def below(x, limit):
    # a constraint between two arguments that per-tensor generation cannot know about
    if (x > limit).any():
        raise ValueError("x must stay below limit")
    return limit - x
'''


def test_generated_sets_the_reference_rejects_are_replaced_or_dropped(tmp_path: Path) -> None:
    (tmp_path / "pair.py").write_text(PAIR)
    captured = tmp_path / "captured.pt"
    x = torch.linspace(0, 1, 1000)
    torch.save({"signature": "float32[1000]@cpu, float32[1000]@cpu", "sets": [[x, x + 0.01]]}, captured)
    os.chdir(tmp_path)
    reference = ReferenceSpec("function", tmp_path / "pair.py", "below", module="pair", rootdir=tmp_path)
    with Oracle(reference, CheckConfig(time_budget=0.1, n_seeds=3), tmp_path,
                workloads=[{"name": "w", "captured": str(captured)}]) as oracle:
        (workload,) = oracle.workloads
    # the reference did not fail the run; with none of the generated sets accepted (1000
    # independent draws each), the check is flagged as resting on the captured set alone
    assert len(workload.expected) == 1
    assert any("rejected every generated input set" in r for r in workload.weak)


FIRST_SMALL = '''
def first_small(x):
    # rejects most generated sets (their first value is rarely this small), never the captured one
    if float(x[0]) > 0.2:
        raise ValueError("x[0] must be at most 0.2")
    return x * 2
'''


def test_timed_calls_on_known_sets_make_the_check_weak(tmp_path: Path) -> None:
    """Where the reference rejects some generated sets, the timed calls cannot have fresh
    values and reuse sets the candidate was handed during the checks: a kernel caching its
    outputs by input would look fast there, so the check is weak (no apply, no pull request)."""
    (tmp_path / "first.py").write_text(FIRST_SMALL)
    captured = tmp_path / "captured.pt"
    torch.save({"signature": "float32[1000]@cpu", "sets": [[torch.linspace(0, 1, 1000)]]}, captured)
    os.chdir(tmp_path)
    reference = ReferenceSpec("function", tmp_path / "first.py", "first_small", module="first", rootdir=tmp_path)
    with Oracle(reference, CheckConfig(time_budget=0.1, n_seeds=20), tmp_path,
                workloads=[{"name": "w", "captured": str(captured)}]) as oracle:
        (workload,) = oracle.workloads
    assert not workload.fresh and 1 < len(workload.expected) < 21, len(workload.expected)
    assert any("the timed calls reuse" in r and "caches its outputs" in r for r in workload.weak), workload.weak


def test_the_seed_reproduces_the_generated_sets(tmp_path: Path) -> None:
    """``--seed`` reproduces a run's generated input sets (and so their expected outputs);
    another seed draws others."""
    (tmp_path / "first.py").write_text(FIRST_SMALL.replace("if float(x[0]) > 0.2:", "if False:"))
    captured = tmp_path / "captured.pt"
    torch.save({"signature": "float32[1000]@cpu", "sets": [[torch.linspace(0, 0.1, 1000)]]}, captured)
    os.chdir(tmp_path)
    reference = ReferenceSpec("function", tmp_path / "first.py", "first_small", module="first", rootdir=tmp_path)

    def expected(seed: int) -> list:
        with Oracle(reference, CheckConfig(time_budget=0.1, n_seeds=2, seed=seed), tmp_path,
                    workloads=[{"name": "w", "captured": str(captured)}]) as oracle:
            return [t for s in oracle.workloads[0].expected for t in s]

    first, again, other = expected(7), expected(7), expected(8)
    assert len(first) == 3 and all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.equal(first[0], other[0]) and not torch.equal(first[1], other[1])  # the captured set, then drawn ones


SAFE_LOG_LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def safe_log(x):
    if (x <= 0).any():
        raise ValueError("safe_log: x must be positive")
    return torch.log(x)
'''

SAFE_LOG_TESTS = '''
import pytest
import torch

from mylog import safe_log


def test_positive():
    x = torch.rand(4096) * 0.5 + 1e-3
    torch.testing.assert_close(safe_log(x), torch.log(x))


def test_rejects_non_positive():
    with pytest.raises(ValueError):
        safe_log(-torch.rand(64, 64))  # its own signature: captured, it would be a workload
'''


def test_safe_log_is_searched_without_its_reference_failing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mylog=SAFE_LOG_LIB, test_mylog=SAFE_LOG_TESTS)
    pytester.makepyprojecttoml("[tool.maxcode]\ntorch_compile = false\n")
    seeds = pytester.path / "maxcode_kernels" / "seeds" / "mylog.safe_log"
    seeds.mkdir(parents=True)
    (seeds / "log.cpp").write_text(SAFE_LOG_CPP)
    result = pytester.runpytest_subprocess("--maxcode", "--maxcode-budget=1", "--maxcode-json=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    import json

    (target,) = json.loads((pytester.path / "report.json").read_text())["targets"]
    assert target["status"] != "failed", target["reason"]  # the reference ran on every generated set
    assert [w["signature"] for w in target["workloads"]] == ["float32[4096]@cpu"]  # the raising call is no workload
    assert target["candidates"] == {"tried": 1, "correct": 1, "faster": target["candidates"]["faster"], "failed": {}}
    # both tests called it, so both re-verify a kernel (the one that raised checks it still raises)
    assert sorted(target["tests"]["rerun"]) == ["test_mylog.py::test_positive", "test_mylog.py::test_rejects_non_positive"]
