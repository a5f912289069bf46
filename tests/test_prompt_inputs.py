"""The prompt states every input the candidate receives (position, name, role, layout) and
every plain value the reference reads, checked against the reference's own introspection."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import time
from pathlib import Path

import pytest

from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.search.prompts import PromptContext, describe_target, describe_target_early, render_inputs
from pytest_maxcode.targets.introspect import describe

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


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _as_tensor(value):
    """A Python scalar as the 0-d tensor the candidate receives it as (a Python float is a double)."""
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype={bool: torch.bool, int: torch.int64, float: torch.float64}[type(value)])


def _layout(value) -> str:
    """The prompt's layout wording, filled from the value's own ``dtype``, ``shape`` and ``stride()``."""
    t = _as_tensor(value)
    text = f"{_dtype(t)}, shape [{_dims(t.shape)}], strides [{_dims(t.stride())}]"
    return text if isinstance(value, torch.Tensor) else f"{text}, value {value!r}"


def _line(head: str, per: dict, every: bool = True) -> str:
    """One prompt line for a value per workload: one layout when all agree, else one per workload."""
    texts = {w: _layout(v) for w, v in per.items()}
    if len(set(texts.values())) == 1:
        return f"{head}: {next(iter(texts.values()))}" + (" in every workload" if every and len(texts) > 1 else "")
    return f"{head}: " + "; ".join(f"{w}: {t}" for w, t in texts.items())


def _outputs(fn, sets: dict[str, list]) -> dict[str, list]:
    """The reference's own outputs per workload."""
    with torch.no_grad():
        return {w: [fn(*vals)] for w, vals in sets.items()}


def _recorded(outs: dict[str, list]) -> dict[str, list]:
    """Outputs as the capture records them in a workload: ``[shape, dtype]``."""
    return {w: [[list(o.shape), _dtype(o)] for o in os] for w, os in outs.items()}


def _output_lines(outs: dict[str, list]) -> list[str]:
    """The caller allocates outputs contiguous: the strides the prompt must state are those of a contiguous copy."""
    return [_line(f"- outputs[{j}]", {w: os[j].contiguous() for w, os in outs.items()}, every=False)
            for j in range(len(next(iter(outs.values()))))]


def _read_attributes(model) -> dict[str, object]:
    """``self.path.attr`` -> value of the plain attributes the model's own ``forward`` methods name."""
    out = {}
    for prefix, sub in model.named_modules():
        if type(sub).__module__.startswith("torch."):
            continue
        read = set(type(sub).forward.__code__.co_names)
        for attr, value in vars(sub).items():
            if attr in read and attr != "training" and isinstance(value, (bool, int, float)):
                out["self" + (f".{prefix}" if prefix else "") + f".{attr}"] = value
    return out


def _plain_globals(fn) -> dict[str, object]:
    return {n: fn.__globals__[n] for n in fn.__code__.co_names
            if n in fn.__globals__ and isinstance(fn.__globals__[n], (bool, int, float, tuple))}


def test_module_prompt_lists_arguments_parameters_buffers_in_abi_order_and_the_values_forward_reads(tmp_path: Path) -> None:
    mod = _import(tmp_path, "refmod_prompt", MODULE_SRC)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    (tmp_path / "inputs").mkdir()
    torch.save(model, tmp_path / "inputs" / "module.pt")  # as pytest --maxcode captures an instance
    sets = {"w0": [torch.randn(8, 10)], "w1": [torch.randn(10, 16).t()]}  # the second workload is strided
    assert not sets["w1"][0].is_contiguous()
    outs = _outputs(model, sets)
    workloads = _workloads(tmp_path, sets, _recorded(outs))
    target = TargetInfo("refmod_prompt.Model", "refmod_prompt", "Model", tmp_path / "refmod_prompt.py", "module", "cpp")
    desc = describe_target(target, workloads, tmp_path)  # the captured instance; the module is imported here
    assert desc is not None
    text = _system(target, workloads, desc)

    args = [p for p in inspect.signature(mod.Model.forward).parameters if p != "self"]
    for pos, name in enumerate(args):
        line = _line(f"- inputs[{pos}] `{name}` (argument)", {w: vals[pos] for w, vals in sets.items()})
        assert line in text, line
    extras = [(n, t, "parameter") for n, t in model.named_parameters()] + [(n, t, "buffer") for n, t in model.named_buffers()]
    assert [n for n, _, _ in extras][:2] == ["add_value", "matmul.weight"]  # own parameters before the submodules'
    for pos, (name, t, role) in enumerate(extras, start=len(args)):
        line = _line(f"- inputs[{pos}] `{name}` ({role})", {"all": t})
        assert line in text, line
    assert f"inputs[{len(args) + len(extras)}]" not in text
    for line in _output_lines(outs):
        assert line in text, line

    read = _read_attributes(model)
    assert set(read) == {"self.scaling_factor", "self.gate.slope"}
    for name, value in read.items():
        assert f"{name} = {value!r}" in text
    for prefix, sub in model.named_modules():
        if prefix and type(sub).__module__.startswith("torch.") and not list(sub.children()):
            assert f"self.{prefix} = {sub!r}" in text
    consts = _plain_globals(type(model).forward)
    assert consts == {"OFFSET": mod.OFFSET}
    for name, value in consts.items():
        assert f"{name} = {value!r}  # module-level" in text
    assert "set_but_unread" not in text and "UNREAD" not in text  # set, never read by a call
    mask = vars(model)["mask"]
    assert f"self.mask = torch.tensor({mask.tolist()!r}, dtype={mask.dtype})  # not passed to the kernel" in text
    assert "`mask`" not in text


def test_kernelbench_problem_prompt_states_the_constructor_call(tmp_path: Path) -> None:
    mod = _import(tmp_path, "refmod_problem", MODULE_SRC)
    sets = {"w0": [torch.randn(8, 10)]}
    init = list(mod.get_init_inputs())
    outs = _outputs(mod.Model(*init), sets)
    workloads = _workloads(tmp_path, sets, _recorded(outs))
    target = TargetInfo("refmod_problem.Model", "refmod_problem", "Model", tmp_path / "refmod_problem.py", "module", "cpp", problem=True)
    desc = describe_target(target, workloads, tmp_path)  # built from get_init_inputs() in a child process
    assert desc is not None
    text = _system(target, workloads, desc)

    names = [p for p in inspect.signature(mod.Model.__init__).parameters if p != "self"]
    assert len(names) == len(init)
    assert f"# built as {mod.Model.__name__}({', '.join(f'{n}={v!r}' for n, v in zip(names, init))})" in text
    read = _read_attributes(mod.Model(*init))
    assert "self.scaling_factor" in read
    for name, value in read.items():
        assert f"{name} = {value!r}" in text
    assert _line("- inputs[0] `x` (argument)", {"w0": sets["w0"][0]}) in text
    for line in _output_lines(outs):
        assert line in text, line


def test_a_description_read_in_a_child_process_starts_before_it_is_asked_for(tmp_path: Path) -> None:
    """The search starts it before the oracle's workers and reads it after them: the child's
    torch import overlaps theirs. The problem's module marks each process that imports it."""
    marking = "import os, pathlib\npathlib.Path(__file__).with_name(f'imported-{os.getpid()}').touch()\n"
    mod = _import(tmp_path, "refmod_early", marking + MODULE_SRC)
    sets = {"w0": [torch.randn(8, 10)]}
    workloads = _workloads(tmp_path, sets, _recorded(_outputs(mod.Model(*mod.get_init_inputs()), sets)))
    target = TargetInfo("refmod_early.Model", "refmod_early", "Model", tmp_path / "refmod_early.py", "module", "cpp", problem=True)
    get = describe_target_early(target, workloads, tmp_path)
    child = lambda: [m for m in tmp_path.glob("imported-*") if m.name != f"imported-{os.getpid()}"]  # noqa: E731
    deadline = time.monotonic() + 120
    while not child() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child(), "nothing imported the problem before its description was asked for"
    desc = get()
    assert desc is not None and desc == describe_target(target, workloads, tmp_path)


def test_function_prompt_lists_arguments_scalars_and_the_module_constants_the_code_reads(tmp_path: Path) -> None:
    mod = _import(tmp_path, "reffn_prompt", FUNCTION_SRC)
    sets = {"w0": [torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float64), 0.75],
            "w1": [torch.randn(4, 4).t(), torch.randn(8, 4, dtype=torch.float64)[::2], 1.25]}  # strided, both tensors
    assert not any(v.is_contiguous() for v in sets["w1"][:2])
    fn = mod.fused.maxcode.reference  # the undecorated function
    outs = _outputs(fn, sets)
    workloads = _workloads(tmp_path, sets, _recorded(outs))
    target = TargetInfo("reffn_prompt.fused", "reffn_prompt", "fused", tmp_path / "reffn_prompt.py", "function", "cpp")
    desc = describe_target(target, workloads, tmp_path)  # the marked function, imported here
    assert desc is not None and desc == json.loads(json.dumps(describe(fn, sets)))
    text = render_inputs(desc, workloads)

    consts = _plain_globals(fn)
    assert consts == {"ALPHA": mod.ALPHA}
    for name, value in consts.items():
        assert f"{name} = {value!r}  # module-level" in text
    assert "NOT_READ" not in text and "SHAPE_HINT" not in text
    for pos, name in enumerate(inspect.signature(fn).parameters):
        per = {w: vals[pos] for w, vals in sets.items()}
        role = "argument" if isinstance(per["w0"], torch.Tensor) else "scalar"
        line = _line(f"- inputs[{pos}] `{name}` ({role})", per)
        assert line in text, line
    assert f"inputs[{len(sets['w0'])}]" not in text
    for line in _output_lines(outs):
        assert line in text, line


HELPER_SRC = """
import math

import torch
import torch.nn as nn

import pytest_maxcode

EPS = 1e-05
LIMIT = 3.0
WEIGHTS = torch.tensor([0.5, 1.0, 2.0, 4.0])
TABLE = torch.arange(64, dtype=torch.float64).reshape(8, 8)
UNUSED = 11
UNUSED_TENSOR = torch.ones(3)


def _clamp(t):
    return t.clamp(-LIMIT, LIMIT)


def _norm(t, n):
    if n > 0:
        return _norm(t, n - 1)  # recursive: followed once
    return _clamp(t / (t.abs().max() + EPS))


def relu(t):  # named by fused only as an attribute (t.relu()), never called
    return t * UNUSED + UNUSED_TENSOR.sum()


@pytest_maxcode.optimize
def fused(x):
    return _norm(x * WEIGHTS, 2).relu() + TABLE.sum() + math.pi


class Model(nn.Module):
    def forward(self, x):
        return _clamp(x) * WEIGHTS
"""


def _tensor_const(name: str, t) -> str:
    if t.numel() <= 16:
        return f"{name} = torch.tensor({t.tolist()!r}, dtype={t.dtype})  # module-level"
    return f"{name} = ...  # module-level; a {_dtype(t)} tensor of shape {list(t.shape)}; its {t.numel()} values are not shown"


def test_constants_read_by_same_module_helpers_and_tensor_constants_are_stated(tmp_path: Path) -> None:
    mod = _import(tmp_path, "reffn_helpers", HELPER_SRC)
    fn = mod.fused.maxcode.reference
    sets = {"w0": [torch.randn(3, 4)]}
    desc = describe(fn, sets)
    text = render_inputs(desc, [])
    assert [n for n, _ in desc["globals"]] == ["EPS", "LIMIT", "TABLE", "WEIGHTS"]  # _norm's and _clamp's, transitively
    for name in ("EPS", "LIMIT"):
        assert f"{name} = {getattr(mod, name)!r}  # module-level" in text
    for name in ("WEIGHTS", "TABLE"):
        assert _tensor_const(name, getattr(mod, name)) in text
    assert repr(float(mod.TABLE.flatten()[-1])) not in text  # a large tensor's values are not listed
    assert "UNUSED" not in text and "math" not in text and "_clamp" not in text

    model = mod.Model()
    desc = describe(type(model).forward, sets, module=model)
    assert [n for n, _ in desc["globals"]] == ["LIMIT", "WEIGHTS"]
    text = render_inputs(desc, [])
    assert f"LIMIT = {mod.LIMIT!r}  # module-level" in text and _tensor_const("WEIGHTS", mod.WEIGHTS) in text


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
