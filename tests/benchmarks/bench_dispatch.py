"""What a decorated call costs besides its work: with nothing accepted, and with an accepted kernel.

    python tests/benchmarks/bench_dispatch.py

Prints JSON:

* ``function`` / ``module``: nanoseconds per call for the bare function and the decorated one
  when nothing is accepted, and the overhead (goal: under 1 µs).
* ``native_call_us``: ``abi.call_native`` of a kernel that does nothing (allocate one 64x128
  float32 output, describe 1-4 64x128 inputs, call), through the struct+ctypes path (``old``)
  and the compiled call path (``new``), µs per call (issue 17's goal: under 2 µs).
* ``dispatched_us``: the same no-op kernel accepted for a decorated function of 1-4 tensors,
  the whole call as user code pays it: before (every check, ctypes) and now (a cached plan,
  the compiled path).
* ``module_dispatched_us``: the same for an ``nn.Module`` target (one input; a weight, a bias
  and a buffer passed after it), under ``torch.no_grad()``: every call checked, and a plan.
* ``load_1min``: the machine's load average while it ran.
"""

from __future__ import annotations

import json
import os
import platform
import time
import timeit
from pathlib import Path

import torch

import pytest_maxcode as maxcode
from pytest_maxcode.native import abi, callpath
from pytest_maxcode.targets.dispatch import NativeDispatcher, arg_key
from pytest_maxcode.targets.introspect import module_state
from pytest_maxcode.targets.lock import LockEntry


def bare(x, y):
    return x


@maxcode.optimize
def decorated(x, y):
    return x


class Bare(torch.nn.Module):
    def forward(self, x):
        return x


@maxcode.optimize
class Decorated(torch.nn.Module):
    def forward(self, x):
        return x


@maxcode.optimize
class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(128, 128)
        self.register_buffer("shift", torch.zeros(128))

    def forward(self, x):
        return self.lin(x) + self.shift


def per_call_ns(stmt: str, env: dict, number: int = 1_000_000) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9


@maxcode.optimize
def take1(a):
    return a


@maxcode.optimize
def take2(a, b):
    return a


@maxcode.optimize
def take3(a, b, c):
    return a


@maxcode.optimize
def take4(a, b, c, d):
    return a


def per_call_us(call, number: int = 20_000) -> float:
    """Median of five runs of ``number`` calls, µs per call."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(number):
            call()
        runs.append((time.perf_counter_ns() - t0) / number / 1e3)
    return round(sorted(runs)[2], 3)


def native_calls(noop: abi.NativeKernel) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    meta = [((64, 128), torch.float32)]
    cpu = torch.device("cpu")
    for n in range(1, 5):
        args = [torch.randn(64, 128) for _ in range(n)]
        out[f"{n}_tensors"] = {
            "old": per_call_us(lambda args=args: abi.call_native_ctypes(noop, args, [], meta, cpu)),
            "new": per_call_us(lambda args=args: abi.call_native(noop, args, [], meta, cpu)),
        }
    return out


def dispatched(noop: abi.NativeKernel) -> dict[str, dict[str, float]]:
    """The decorated function with the no-op kernel accepted (the dispatcher the lock installs)."""
    out: dict[str, dict[str, float]] = {}
    torch.set_grad_enabled(False)
    for n, fn in enumerate((take1, take2, take3, take4), start=1):
        args = [torch.randn(64, 128) for _ in range(n)]
        handle = fn.maxcode
        entry = LockEntry(target=handle.id, reference_hash="", kernel="noop.cpp", kernel_hash="", lang="cpp",
                          device="cpu", arch="", speedup=1.0, speedup_ci=[1.0, 1.0], date="", tool_version="",
                          extra={"outputs": {arg_key(args): [[[64, 128], "float32"]]}})
        d = NativeDispatcher(handle, entry, Path.cwd())
        d.kernel = noop
        handle._impl, handle.active = d, "kernel"
        helper = abi._HELPER[:]
        abi._HELPER.clear()  # before: every call checked, then struct + ctypes
        old = per_call_us(lambda fn=fn, args=args: fn(*args))
        abi._HELPER[:] = helper
        d.fast = abi.helper()
        new = per_call_us(lambda fn=fn, args=args: fn(*args))
        out[f"{n}_tensors"] = {"old": old, "new": new}
        handle._impl, handle.active = None, "reference"
    return out


def module_dispatched(noop: abi.NativeKernel) -> dict[str, float]:
    """The decorated module with the no-op kernel accepted: every call checked (as before
    module calls had plans), then planned."""
    torch.set_grad_enabled(False)
    m, x = Affine(), torch.randn(64, 128)
    handle = Affine.maxcode
    entry = LockEntry(target=handle.id, reference_hash="", kernel="noop.cpp", kernel_hash="", lang="cpp",
                      device="cpu", arch="", speedup=1.0, speedup_ci=[1.0, 1.0], date="", tool_version="",
                      extra={"outputs": {arg_key([x]): [[[64, 128], "float32"]]}, "module_state": module_state(m)})
    d = NativeDispatcher(handle, entry, Path.cwd())
    d.kernel = noop
    handle._impl, handle.active = d, "kernel"
    checked = per_call_us(lambda: d._checked(None, (m, x), {}))
    d.fast = abi.helper()
    m(x)  # leaves the plan
    planned = per_call_us(lambda: m(x))
    handle._impl, handle.active = None, "reference"
    return {"checked": checked, "planned": planned}


def main() -> None:
    helper = callpath.load()
    if helper is None:
        raise SystemExit(f"the compiled call path is not available: {callpath.fallback_reason()}")
    noop = abi.NativeKernel.at_address(helper.noop_address())
    load = os.getloadavg()[0]
    calls = native_calls(noop)
    disp = dispatched(noop)
    mod = module_dispatched(noop)
    t = torch.ones(1)
    env = {"bare": bare, "decorated": decorated, "t": t, "mb": Bare(), "md": Decorated()}
    f_bare = per_call_ns("bare(t, t)", env)
    f_dec = per_call_ns("decorated(t, t)", env)
    m_bare = per_call_ns("mb(t)", env, 200_000)
    m_dec = per_call_ns("md(t)", env, 200_000)
    print(json.dumps({
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(), "torch": torch.__version__},
        "function": {"bare_ns": round(f_bare, 1), "decorated_ns": round(f_dec, 1), "overhead_ns": round(f_dec - f_bare, 1)},
        "module": {"bare_ns": round(m_bare, 1), "decorated_ns": round(m_dec, 1), "overhead_ns": round(m_dec - m_bare, 1)},
        "goal_overhead_ns": 1000,
        "native_call_us": calls,
        "dispatched_us": disp,
        "module_dispatched_us": mod,
        "goal_native_call_us": 2.0,
        "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
    }, indent=2))


if __name__ == "__main__":
    main()
