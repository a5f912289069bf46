"""The built-in search without a model or seeds: ``torch.compile`` variants of functions and
modules alike, each its own candidate, and the run's last line says what a model or a seed adds.

The end-to-end test compiles (tens of seconds a candidate on a small CPU): one run, budget 2,
a tiny module.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.search.policy import (
    WITHOUT_MODEL,
    BuiltinPolicy,
    TargetInfo,
    compile_variants,
)

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize
class Scaled(torch.nn.Module):
    """A linear layer and a scale: built without arguments, as the runtime builds ModelNew."""

    def __init__(self, n=16):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.scale = 0.5

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


class Sized(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x * self.n


@maxcode.optimize
def double(x):
    return x * 2
'''

TESTS = '''
import torch

from mylib import Scaled


def test_scaled():
    torch.manual_seed(1)
    m = Scaled().eval()
    with torch.no_grad():
        m.lin.weight.mul_(3.0)  # trained weights: a fresh Scaled() does not have them
        x = torch.randn(8, 16)
        torch.testing.assert_close(m(x), torch.relu(x @ m.lin.weight.T + m.lin.bias) * 0.5)
'''


def target(tmp_path: Path, qualname: str, kind: str) -> TargetInfo:
    (tmp_path / "mylib.py").write_text(LIB)
    return TargetInfo(id=f"mylib.{qualname}", module="mylib", qualname=qualname, source_file=tmp_path / "mylib.py", kind=kind)


def test_functions_and_modules_get_the_variants_that_apply_on_the_device(tmp_path: Path) -> None:
    module = BuiltinPolicy(target(tmp_path, "Scaled", "module"), tmp_path, "cpu").proposals()
    names = [p.origin for p in module]
    assert len(names) > 1 and names[0] == "torch.compile:default" and "torch.compile:freezing" in names
    assert not any("reduce-overhead" in n for n in names)  # CUDA graphs only on a GPU
    for p in module:  # each a compat ModelNew that compiles the reference's forward with its own settings
        tree = ast.parse(p.spec.text)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert len({p.spec.path for p in module}) == len(module)

    function = BuiltinPolicy(target(tmp_path, "double", "function"), tmp_path, "cuda").proposals()
    assert [p.origin for p in function][:2] == ["torch.compile:default", "torch.compile:reduce-overhead"]
    assert "freezing" not in " ".join(p.origin for p in function)  # a function has no weights to fold

    # a module whose constructor takes arguments gets them too: ModelNew.maxcode_from wraps the
    # live instance at run time (and a copy of the captured one in the oracle), so nothing is rebuilt
    assert [p.origin for p in BuiltinPolicy(target(tmp_path, "Sized", "module"), tmp_path, "cpu").proposals()] == names
    assert BuiltinPolicy(target(tmp_path, "Scaled", "module"), tmp_path, "cpu", torch_compile=False).proposals() == []

    assert all(len(compile_variants(k, d, {"avx512f"})) <= 4 for k in ("function", "module") for d in ("cpu", "cuda"))
    assert "simdlen=256+freezing" in [v.name for v in compile_variants("module", "cpu", {"avx512f"})]
    assert not any("simdlen" in v.name for v in compile_variants("module", "cpu", {"avx2"}))


@pytest.mark.slow
def test_a_module_searched_without_a_model_gets_several_compiled_candidates(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "mylib.py").write_text(LIB)
    (tmp_path / "test_lib.py").write_text(TESTS)
    (tmp_path / "pyproject.toml").write_text('[tool.maxcode]\nbudget = 2\ndevice = "cpu"\n\n'
                                             '[tool.pytest.ini_options]\npythonpath = ["."]\n')
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", "--maxcode-target=mylib.Scaled",
           "--maxcode-json=report.json"]
    run = subprocess.run(cmd, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    entry = next(t for t in report["targets"] if t["id"] == "mylib.Scaled")
    origins = [row["origin"] for row in entry["trajectory"]]
    assert origins == ["torch.compile:default", "torch.compile:freezing"], entry
    # the compiled copies hold the captured instance's weights: correct, not merely run
    assert entry["candidates"]["correct"] == 2, entry["candidates"]
    assert WITHOUT_MODEL in run.stdout.splitlines()
