"""Output tensors forged in the sandbox (red team B, F4): ``torch.load(weights_only=True)``
rebuilds meta, sparse, nested and quantized tensors, subclasses and odd strides; the protocol
rejects each with the reason, compare never raises on one, and a batch goes on after it."""

from __future__ import annotations

import collections
import io
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import DATA, run_maxcode
from torch._utils import _rebuild_tensor_v2

from pytest_maxcode.oracle.compare import compare
from pytest_maxcode.oracle.pool import load_child_message
from pytest_maxcode.oracle.protocol import ProtocolError, tensor_problem

ATTACKS = DATA / "attacks"
FORGED = ("meta", "sparse_coo", "sparse_csr", "nested")


def _sent(outputs: list[Any], name: str = "outputs") -> bytes:
    """An event as the worker's ``_send_child`` writes it."""
    kwargs: dict[str, Any] = {"workload": "default", "set": 0, "outputs": outputs}
    if name == "range":
        kwargs = {"workload": "default", "label": "wide", "outputs": outputs, "raised": ""}
    elif name == "counts":
        kwargs = {"workload": "default", "reference": [1], "candidate": [1], "rechecks": [[0, outputs]]}
    buf = io.BytesIO()
    torch.save((name, kwargs), buf)
    return buf.getvalue()


class _Rebuilt:
    """Pickles as a tensor over ``storage`` with any offset, shape and strides: what a worker
    that writes its own pickle can send, past the checks ``as_strided`` makes when sending."""

    def __init__(self, storage: torch.UntypedStorage, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.float32, _internal=True)
        self.args = (typed, offset, shape, strides, False, collections.OrderedDict())

    def __reduce_ex__(self, protocol: Any) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
        return (_rebuild_tensor_v2, self.args)


HONEST: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: torch.randn(4, 8),
    "a transpose's clone keeps its strides": lambda: torch.randn(8, 4).t().clone(),
    "a channels-last clone": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).clone(),
    "a scalar": lambda: torch.tensor(1.5),
    "empty": lambda: torch.empty(0, 3),
    "a size-1 dim with any stride": lambda: torch.randn(4, 8).unsqueeze(1),
    "bool": lambda: torch.ones(5, dtype=torch.bool),
    "int64": lambda: torch.arange(6),
    "complex64": lambda: torch.randn(3, dtype=torch.complex64),
    "float16": lambda: torch.randn(3, dtype=torch.float16),
}


@pytest.mark.parametrize("kind", sorted(HONEST))
def test_what_the_worker_sends_passes(kind: str) -> None:
    t = HONEST[kind]()
    assert tensor_problem(t) == ""
    got = load_child_message(_sent([t])).kwargs["outputs"][0]
    assert torch.equal(got, t) and got.stride() == t.stride()


FORGERIES: dict[str, tuple[Callable[[], Any], str]] = {
    "meta": (lambda: torch.empty(256, 1024, device="meta"), "on device meta"),
    "sparse_coo": (lambda: torch.randn(4, 8).to_sparse(), "layout torch.sparse_coo"),
    "sparse_csr": (lambda: torch.randn(4, 8).to_sparse_csr(), "layout torch.sparse_csr"),
    "nested": (lambda: torch.nested.nested_tensor([torch.randn(8), torch.randn(8)]), "a nested tensor"),
    "parameter": (lambda: torch.nn.Parameter(torch.randn(4, 8)), "Parameter (a tensor subclass)"),
    "quantized": (lambda: torch.quantize_per_tensor(torch.randn(4, 8), 0.1, 0, torch.qint8), "quantized"),
    "requires grad": (lambda: torch.randn(4, 8).requires_grad_(), "requires grad"),
    "expanded (stride 0)": (lambda: torch.zeros(1, 8).expand(4, 8), "overlapping or gapped strides (0, 1)"),
    "a strided view of a larger storage": (lambda: torch.zeros(64).as_strided((4, 4), (8, 2)), "overlapping or gapped"),
    "overlapping rows (pickled by hand)": (lambda: _Rebuilt(torch.zeros(16).untyped_storage(), 0, (4, 4), (1, 1)), "overlapping or gapped"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's beta/prototype notes for sparse CSR, nested, quantized
@pytest.mark.parametrize("event", ["outputs", "range", "counts"])
@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_a_forged_tensor_is_a_protocol_error_with_the_reason(kind: str, event: str) -> None:
    make, why = FORGERIES[kind]
    with pytest.raises(ProtocolError, match="item 0 is ") as raised:
        load_child_message(_sent([make()], event))
    assert why in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 200


def test_only_the_exotic_item_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"event 'outputs': outputs: item 1 is a tensor on device meta"):
        load_child_message(_sent([torch.zeros(2), torch.empty(2, device="meta")]))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("offset", "shape", "strides"), [
    (0, (1 << 20, 1 << 20), (1 << 20, 1)),  # far more elements than the storage holds
    (1 << 30, (4,), (1,)),  # an offset past the storage's end
    (2, (4,), (-1,)),  # a negative stride
])
def test_a_tensor_outside_its_storage_does_not_load(offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
    # torch.load refuses these itself (the storage it read cannot grow): one more protocol error
    with pytest.raises(ProtocolError, match="does not load as data"):
        load_child_message(_sent([_Rebuilt(torch.zeros(4).untyped_storage(), offset, shape, strides)]))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["meta", "sparse_coo", "sparse_csr", "nested", "expanded (stride 0)"])
def test_compare_calls_an_uncomparable_output_a_mismatch_and_never_raises(kind: str) -> None:
    expected = [torch.randn(256, 1024)] if kind == "meta" else [torch.randn(4, 8)]
    if kind == "nested":
        expected = [torch.randn(2, 8)]
    got = FORGERIES[kind][0]()
    mismatch = compare(expected, [got], None, None)
    assert mismatch is not None and mismatch.output == 0
    assert "\n" not in mismatch.reason and len(mismatch.reason) < 300


def test_compare_still_passes_and_fails_plain_outputs() -> None:
    e = torch.randn(4, 8)
    assert compare([e], [e.clone()], None, None) is None
    mismatch = compare([e], [e + 1], None, None)
    assert mismatch is not None and "32/32 elements wrong" in mismatch.reason


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One ``maxcode check``: an honest kernel, the four forgers, the honest kernel again."""
    project = tmp_path_factory.mktemp("forged")
    shutil.copy(ATTACKS / "ref.py", project / "ref.py")
    shutil.copy(ATTACKS / "honest.cpp", project / "honest.cpp")
    template = (ATTACKS / "c20_forged_tensor_compat.py").read_text()
    names = []
    for kind in FORGED:
        names.append(f"forge_{kind}.py")
        (project / names[-1]).write_text(template.replace("@KIND@", kind))
    shutil.copy(project / "honest.cpp", project / "honest_after.cpp")
    result = run_maxcode(["check", "ref.py", "honest.cpp", *names, "honest_after.cpp",
                          "--json", "--time-budget", "0.1", "--timeout", "30", "--max-memory", "256M"], cwd=project)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.by_name()


@pytest.mark.parametrize("kind", FORGED)
def test_a_forged_output_tensor_is_rejected_with_the_reason(batch: dict[str, dict[str, Any]], kind: str) -> None:
    v = batch[f"forge_{kind}.py"]
    assert v["status"] == "rejected", v
    assert v["reasons"][0].startswith("broke the worker protocol: event 'outputs': outputs: item 0 is "), v["reasons"]
    assert v["speedup"] is None


def test_the_honest_neighbours_still_get_their_verdicts(batch: dict[str, dict[str, Any]]) -> None:
    order = list(batch)
    assert order[0] == "honest.cpp" and order[-1] == "honest_after.cpp"
    for name in ("honest.cpp", "honest_after.cpp"):
        assert batch[name]["status"] in ("faster", "not_faster"), batch[name]
        assert batch[name]["speedup"] is not None
