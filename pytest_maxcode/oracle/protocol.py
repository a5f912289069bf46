"""The worker protocol, validated on the trusted side: named events with keyword data.

A worker that loaded candidate code can send anything; what arrives is checked against
this table (names, keys, types) before the oracle looks at it, and anything else is a
:class:`ProtocolError`, which the oracle turns into a ``rejected`` verdict with the reason.
A worker can only *report* a failure; the statuses it may name are the failure ones.

Two channels carry events, both as ``(name, {keywords})`` (pytest-xdist's style): a
job's channel (``torch.save`` bytes, :data:`EVENTS`) and the zygote's control socket
(JSON ``[name, {keywords}]``, :data:`CTL_EVENTS`). The commands the trusted side sends
the other way have the same shape and are read by name and keyword there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

#: the statuses a worker may report about itself (never a success)
WORKER_STATUSES = ("compile_error", "runtime_error", "rejected", "wrong")


class ProtocolError(Exception):
    """A message that is not a well-formed event of the protocol."""


#: the most dimensions an output may have (torch's own kernels stop at 25)
MAX_DIMS = 64


def tensor_problem(t: Any) -> str:
    """Why ``t`` is not a tensor the worker sends ('' when it is one).

    The worker sends detached clones moved to the CPU: a plain, dense, strided CPU tensor
    whose storage holds every element. ``torch.load(weights_only=True)`` also rebuilds meta,
    sparse, nested and quantized tensors, subclasses and views with zero or overlapping
    strides, and comparing those raises or reads past what was sent, inside the trusted process.
    """
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}, not a tensor"
    if type(t) is not torch.Tensor:
        return f"a {type(t).__name__} (a tensor subclass), not a plain tensor"
    if t.is_nested:
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a tensor with layout {t.layout}, not strided"
    if t.device.type != "cpu":
        return f"a tensor on device {t.device}, not the cpu the worker sends outputs on"
    if t.is_quantized:
        return f"a quantized tensor ({t.dtype})"
    if t.requires_grad:
        return "a tensor that requires grad, not a detached one"
    if t.dim() > MAX_DIMS:
        return f"a tensor of {t.dim()} dimensions (at most {MAX_DIMS})"
    if t.numel() == 0:
        return ""
    if not _dense(tuple(t.shape), t.stride()):
        return f"a tensor with overlapping or gapped strides {t.stride()[:8]} for shape {tuple(t.shape)[:8]}"
    if (t.storage_offset() + t.numel()) * t.element_size() > t.untyped_storage().nbytes():
        return "a tensor larger than its storage"
    return ""


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether the elements tile one block of memory exactly once (what a clone's strides do,
    in any dimension order): torch's "non-overlapping and dense"."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(shape, strides) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _tensor_list(v: Any) -> bool:
    """A list of tensors as the worker sends them; the first exotic one says why."""
    if not (isinstance(v, list) and all(isinstance(t, torch.Tensor) for t in v)):
        return False
    for i, t in enumerate(v):
        why = tensor_problem(t)
        if why:
            raise ProtocolError(f"item {i} is {why}")
    return True


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _rechecks(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and _tensor_list(r[1]) for r in v
    )


def _is(*types: type) -> Any:
    return lambda v: isinstance(v, types) and not (isinstance(v, bool) and bool not in types)


#: event name -> {keyword: check}
EVENTS: dict[str, dict[str, Any]] = {
    "stage": {"what": _is(str)},
    "loaded": {"load_s": _is(float, int)},
    "outputs": {"workload": _is(str), "set": _is(int), "outputs": _tensor_list},
    "range": {"workload": _is(str), "label": _is(str), "outputs": _tensor_list, "raised": _is(str)},
    "serving": {},
    "mapped": {"pinned": _is(bool)},
    "staged": {"fresh": _is(bool)},
    "flushed": {},
    "counts": {"workload": _is(str), "reference": _int_list, "candidate": _int_list, "rechecks": _rechecks},
    "reference": {},
    "error": {"status": lambda v: v in WORKER_STATUSES, "message": _is(str), "detail": _is(str)},
    "done": {},
}


def _natural(v: Any) -> bool:
    """A pid, job id or count: the trusted side signals pids, so 0 and -1 (whole groups) never pass."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


#: the zygote's control events: name -> {keyword: check}
CTL_EVENTS: dict[str, dict[str, Any]] = {
    "ready": {"python": _is(str), "torch": _is(str), "call_path": _is(str)},
    "setup_error": {"message": _is(str), "detail": _is(str)},
    "ok": {},
    "forked": {"job_id": _natural, "pid": _natural},
    "exited": {"job_id": _natural, "pid": _natural, "status": _is(int), "leftovers": _count},
}


@dataclass(frozen=True)
class Event:
    name: str
    kwargs: dict[str, Any]


def validate(msg: Any, events: dict[str, dict[str, Any]] = EVENTS) -> Event:
    """The event ``msg`` is (one of ``events``), or ProtocolError saying what is wrong with it."""
    if not (isinstance(msg, tuple) and len(msg) == 2 and isinstance(msg[0], str) and isinstance(msg[1], dict)):
        raise ProtocolError("a message that is not a (name, {keywords}) event")
    name, kwargs = msg
    spec = events.get(name)
    if spec is None:
        raise ProtocolError(f"an unknown event {name[:40]!r}")
    if set(kwargs) != set(spec):
        raise ProtocolError(f"event {name!r} with keywords {sorted(map(str, kwargs))[:6]}, expected {sorted(spec)}")
    for key, check in spec.items():
        try:
            valid = check(kwargs[key])
        except ProtocolError as e:  # a check that can say more than "not valid"
            raise ProtocolError(f"event {name!r}: {key}: {e}") from None
        if not valid:
            raise ProtocolError(f"event {name!r}: {key} is not valid")
    return Event(name, kwargs)


def load_ctl(data: bytes) -> Event:
    """A control message from the zygote: JSON ``[name, {keywords}]``, validated like a job's events."""
    try:
        msg = json.loads(data)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
        raise ProtocolError("a control message that is not JSON") from None
    if isinstance(msg, list) and len(msg) == 2:  # JSON has no tuples: the array is the event's pair
        msg = tuple(msg)
    return validate(msg, CTL_EVENTS)
