"""Accepted compat kernels of an ``nn.Module`` target, as the runtime dispatcher runs them.

A compat ``ModelNew`` that calls the target's own forward (the built-in ``torch.compile``
candidates do; so does a model's subclass that keeps part of the reference) reached the
decorated forward again, whose dispatcher called the kernel again: 100 levels of recursion
ended in a RecursionError, a silent fall-back to the reference on every call, and a kernel call
count that still made verification pass. The dispatcher now runs such inner calls as the
reference, and a ``ModelNew`` with a ``maxcode_from(instance)`` class method is built around
the live module itself, so a module whose constructor takes arguments gets compiled
candidates too.
"""

from __future__ import annotations

import json
import re

import pytest

from pytest_maxcode.search.policy import (
    BuiltinPolicy,
    TargetInfo,
    compile_candidate_text,
    compile_variants,
)
from pytest_maxcode.targets.accept import accept

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize
class Affine(torch.nn.Module):
    """Its constructor takes arguments: ModelNew() could not build it."""

    def __init__(self, n, scale):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale
'''

SUBCLASS = '''
import torch
from mylib import Affine


class ModelNew(torch.nn.Module):
    """A model-written kernel that keeps part of the reference: it calls Affine.forward."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    @classmethod
    def maxcode_from(cls, instance):
        return cls(instance)

    def forward(self, x):
        return Affine.forward(self.inner, x) + 0.0
'''

USE = '''
import warnings

import torch

import mylib
from pytest_maxcode.targets.handle import MaxcodeWarning


def test_the_kernel_runs_on_the_live_module():
    h = mylib.Affine.maxcode
    a, b = mylib.Affine(16, 0.5), mylib.Affine(16, 2.0)
    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MaxcodeWarning)  # a fall-back to the reference warns
        for m in (a, b, a):
            with torch.no_grad():
                want = torch.relu(torch.nn.functional.linear(x, m.lin.weight, m.lin.bias)) * m.scale
            torch.testing.assert_close(m(x), want)
        with torch.no_grad():
            a.lin.weight.mul_(3.0)  # the kernel reads the live module's weights, not a copy
            want = torch.relu(torch.nn.functional.linear(x, a.lin.weight, a.lin.bias)) * a.scale
        torch.testing.assert_close(a(x), want)
    print("ACTIVE", h.active, "|", h.reason)
    print("CALLS", h._impl.calls)
'''


def _project(pytester: pytest.Pytester, kernel: str) -> None:
    pytester.makepyfile(mylib=LIB, test_use=USE)
    accept(pytester.path, target_id="mylib.Affine", reference_file=pytester.path / "mylib.py", qualname="Affine",
           kernel_source=kernel, lang="py", device="cpu", arch="x86_64", speedup=1.5, speedup_ci=[1.2, 1.8])


def _ran_as_kernel(result: pytest.RunResult) -> None:
    assert result.ret == 0, result.stdout.str()[-3000:]
    out = result.stdout.str()
    assert re.search(r"\bACTIVE kernel \|", out), out[-2000:]
    # the three checked calls and the one after the weights changed, each counted once
    assert re.search(r"^CALLS 4$", out, re.MULTILINE), out[-2000:]
    assert "RecursionError" not in out and "kernel failed" not in out


def test_a_compiled_module_candidate_runs_compiled_on_a_module_with_constructor_arguments(pytester: pytest.Pytester) -> None:
    first = compile_variants("module", "cpu")[0]  # the default compile: it reads the live weights on every call
    _project(pytester, compile_candidate_text("mylib.Affine", "mylib", "Affine", "module", first))
    _ran_as_kernel(pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "test_use.py"))


def test_a_kernel_that_calls_the_reference_forward_gets_the_reference_there(pytester: pytest.Pytester) -> None:
    _project(pytester, SUBCLASS)
    _ran_as_kernel(pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "test_use.py"))


def test_the_builtin_policy_offers_compiled_candidates_for_a_module_with_constructor_arguments(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mylib=LIB)
    info = TargetInfo(id="mylib.Affine", module="mylib", qualname="Affine", source_file=pytester.path / "mylib.py",
                      kind="module")
    origins = [p.origin for p in BuiltinPolicy(info, pytester.path, "cpu").proposals()]
    assert origins and all(o.startswith("torch.compile:") for o in origins), origins


TESTS = '''
import torch

from mylib import Affine


def test_affine():
    torch.manual_seed(1)
    m = Affine(16, 0.5).eval()
    with torch.no_grad():
        m.lin.weight.mul_(3.0)  # trained weights: a fresh Affine(16, 0.5) does not have them
        x = torch.randn(8, 16)
        torch.testing.assert_close(m(x), torch.relu(x @ m.lin.weight.T + m.lin.bias) * 0.5)
'''


@pytest.mark.slow
def test_the_oracle_checks_a_compiled_candidate_built_around_the_captured_module(pytester: pytest.Pytester) -> None:
    """Built around its own copy of the captured instance, trained weights and constructor
    arguments included: correct, where ModelNew() could not even be built."""
    pytester.makepyfile(mylib=LIB, test_affine=TESTS)
    pytester.makefile(".toml", pyproject='[tool.maxcode]\nbudget = 1\ndevice = "cpu"\n\n'
                                         '[tool.pytest.ini_options]\npythonpath = ["."]\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--maxcode", "--maxcode-target=mylib.Affine",
                                           "--maxcode-json=report.json", timeout=900)
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "report.json").read_text())
    entry = next(t for t in report["targets"] if t["id"] == "mylib.Affine")
    assert [row["origin"] for row in entry["trajectory"]] == ["torch.compile:default"], entry
    assert entry["candidates"]["correct"] == 1, entry["trajectory"]
