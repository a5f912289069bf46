"""The prompt states every input the candidate receives (position, name, role, layout) and
every plain value the reference reads, checked against the reference's own introspection."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.search.prompts import PromptContext, describe_target, render_inputs
from pytest_maxcode.targets.introspect import describe, spell

torch = pytest.importorskip("torch")

MODULE_SRC = '''
import torch
import torch.nn as nn

OFFSET = 0.25
UNREAD = 99


class Gate(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))
        self.register_buffer("shift", torch.zeros(n))
        self.slope = 0.125

    def forward(self, y):
        return y * self.scale * self.slope + self.shift


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.gate = Gate(out_features)
        self.add_value = nn.Parameter(torch.randn(out_features))
        self.scaling_factor = scaling_factor
        self.set_but_unread = 3
        self.mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])  # a plain tensor attribute: not an ABI input

    def forward(self, x):
        y = self.gate(self.matmul(x) + self.add_value)
        return y * self.scaling_factor * self.mask + OFFSET


def get_init_inputs():
    return [10, 5, 1.5]


def get_inputs():
    return [torch.randn(8, 10)]
'''

FUNCTION_SRC = '''
import torch

import pytest_maxcode

ALPHA = 0.5
SHAPE_HINT = (4, 4)
NOT_READ = 7


@pytest_maxcode.optimize
def fused(x, y, beta):
    return torch.tanh(x * ALPHA + y * beta)
'''


def _import(tmp_path: Path, name: str, source: str):
    (tmp_path / f"{name}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def _workloads(tmp_path: Path, sets: dict[str, list], outputs: dict[str, list]) -> list[dict]:
    out = []
    for name, values in sets.items():
        path = tmp_path / "inputs" / f"{name}.pt"
        path.parent.mkdir(exist_ok=True)
        torch.save({"signature": name, "sets": [values]}, path)
        out.append({"name": name, "captured": str(path), "signature": name, "outputs": outputs[name]})
    return out


def _system(target: TargetInfo, workloads: list[dict], inputs: dict) -> str:
    return PromptContext(target_id=target.id, kind=target.kind, reference_source="...", fmt="native", lang="cpp",
                         entry="maxcode_run", workloads=workloads, inputs=inputs).system()


def _dims(seq) -> str:
    return ", ".join(map(str, seq))


def test_module_prompt_lists_arguments_parameters_buffers_in_abi_order_and_the_values_forward_reads(tmp_path: Path) -> None:
    mod = _import(tmp_path, "refmod_prompt", MODULE_SRC)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    (tmp_path / "inputs").mkdir()
    torch.save(model, tmp_path / "inputs" / "module.pt")  # as pytest --maxcode captures an instance
    x0, x1 = torch.randn(8, 10), torch.randn(10, 16).t()  # the second workload is strided
    workloads = _workloads(tmp_path, {"w0": [x0], "w1": [x1]}, {"w0": [[[8, 5], "float32"]], "w1": [[[16, 5], "float32"]]})
    target = TargetInfo("refmod_prompt.Model", "refmod_prompt", "Model", tmp_path / "refmod_prompt.py", "module", "cpp")
    desc = describe_target(target, workloads, tmp_path)  # the captured instance; the module is imported here
    assert desc is not None
    text = _system(target, workloads, desc)

    assert "- inputs[0] `x` (argument): w0: float32, shape [8, 10], strides [10, 1]; w1: float32, shape [16, 10], strides [1, 16]" in text
    extras = [(n, t, "parameter") for n, t in model.named_parameters()] + [(n, t, "buffer") for n, t in model.named_buffers()]
    assert [n for n, _, _ in extras][:2] == ["add_value", "matmul.weight"]  # own parameters before the submodules'
    for pos, (name, t, role) in enumerate(extras, start=1):
        line = f"- inputs[{pos}] `{name}` ({role}): {str(t.dtype).replace('torch.', '')}, shape [{_dims(t.shape)}], strides [{_dims(t.stride())}]"
        assert line in text, line
    assert f"inputs[{len(extras) + 1}]" not in text
    assert "- outputs[0]: w0: float32, shape [8, 5], strides [5, 1]; w1: float32, shape [16, 5], strides [5, 1]" in text
    assert f"self.scaling_factor = {spell(model.scaling_factor)}" in text
    assert f"self.gate.slope = {spell(model.gate.slope)}" in text
    assert f"self.matmul = {model.matmul!r}" in text
    assert f"OFFSET = {spell(mod.OFFSET)}" in text
    assert "set_but_unread" not in text and "UNREAD" not in text  # set, never read by a call
    assert "self.mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float32)  # not passed to the kernel" in text
    assert "`mask`" not in text


def test_kernelbench_problem_prompt_states_the_constructor_call(tmp_path: Path) -> None:
    mod = _import(tmp_path, "refmod_problem", MODULE_SRC)
    workloads = _workloads(tmp_path, {"w0": [torch.randn(8, 10)]}, {"w0": [[[8, 5], "float32"]]})
    target = TargetInfo("refmod_problem.Model", "refmod_problem", "Model", tmp_path / "refmod_problem.py", "module", "cpp", problem=True)
    desc = describe_target(target, workloads, tmp_path)  # built from get_init_inputs() in a child process
    assert desc is not None
    text = _system(target, workloads, desc)
    assert "Model(in_features=10, out_features=5, scaling_factor=1.5)" in text
    assert f"self.scaling_factor = {spell(mod.get_init_inputs()[2])}" in text


def test_function_prompt_lists_arguments_scalars_and_the_module_constants_the_code_reads(tmp_path: Path) -> None:
    mod = _import(tmp_path, "reffn_prompt", FUNCTION_SRC)
    x, y = torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float64)
    workloads = _workloads(tmp_path, {"w0": [x, y, 0.75]}, {"w0": [[[4, 4], "float64"]]})
    target = TargetInfo("reffn_prompt.fused", "reffn_prompt", "fused", tmp_path / "reffn_prompt.py", "function", "cpp")
    desc = describe_target(target, workloads, tmp_path)  # the marked function, imported here
    assert desc is not None and desc == json.loads(json.dumps(describe(mod.fused.maxcode.reference, {"w0": [x, y, 0.75]})))
    text = render_inputs(desc, workloads)

    fn = mod.fused.maxcode.reference  # the undecorated function
    code = fn.__code__
    read = [n for n in code.co_names if n in fn.__globals__ and isinstance(fn.__globals__[n], (int, float, tuple))]
    assert read == ["ALPHA"]
    for name in read:
        assert f"{name} = {spell(fn.__globals__[name])}  # module-level" in text
    assert "NOT_READ" not in text and "SHAPE_HINT" not in text
    for pos, name in enumerate(code.co_varnames[: code.co_argcount][:2]):
        t = (x, y)[pos]
        assert f"- inputs[{pos}] `{name}` (argument): {str(t.dtype).replace('torch.', '')}, shape [{_dims(t.shape)}]" in text
    assert "- inputs[2] `beta` (scalar): float64, shape [], strides [], value 0.75" in text
    assert "- outputs[0]: float64, shape [4, 4], strides [4, 1]" in text


def test_a_target_this_process_never_imported_is_described_by_a_child(tmp_path: Path) -> None:
    """The search reads targets its process already imported in place (no ~3 s child); it never
    imports one itself: a module the tests did not import is described by a child process."""
    (tmp_path / "reffn_unimported.py").write_text(FUNCTION_SRC)
    x, y = torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float64)
    workloads = _workloads(tmp_path, {"w0": [x, y, 0.75]}, {"w0": [[[4, 4], "float64"]]})
    target = TargetInfo("reffn_unimported.fused", "reffn_unimported", "fused", tmp_path / "reffn_unimported.py", "function", "cpp")
    path = list(sys.path)
    desc = describe_target(target, workloads, tmp_path)
    assert desc is not None and desc["globals"] == [["ALPHA", "0.5"]]
    assert "reffn_unimported" not in sys.modules and sys.path == path


def test_the_feedback_states_the_call_paths_share_of_a_call() -> None:
    from pytest_maxcode.oracle.verdict import Verdict
    from pytest_maxcode.search.observation import verdict_lines
    from pytest_maxcode.search.state import Proposal, SearchState

    v = Verdict("c.cpp", "not_faster", speedup=0.99, candidate_s=17e-6, reference_s=16.8e-6, diagnostics={"call_overhead_us": 9.1})
    lines = verdict_lines(SearchState("t").add(Proposal(None, "test"), v, 0))
    assert "median time: 17.0 us (reference 16.8 us)" in lines
    assert "of which the call path (allocation, descriptors, call) takes about 9.1 us per call" in lines
