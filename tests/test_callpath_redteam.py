"""The dispatcher's cached plans, tried as an attacker or an unlucky user would: every call
either returns what the reference returns or is served by the reference.

Each target is accepted with a kernel written the way a verified kernel is (it reads the
memory of the layouts it was verified on and nothing else), built for real, and imported
in this process; a counter in each kernel tells whether it ran. A call is first made plain
(so a plan is cached for its signature) and then varied in one respect.
"""

from __future__ import annotations

import ctypes
import importlib
import platform
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from pytest_maxcode.targets.accept import accept
from pytest_maxcode.targets.dispatch import arg_key, dispatch_overhead_us, install
from pytest_maxcode.targets.introspect import module_state
from pytest_maxcode.targets.lock import read_lock

pytestmark = pytest.mark.filterwarnings("ignore::pytest_maxcode.targets.handle.MaxcodeWarning")

MODULE = "maxcode_redteam_lib"

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def add(x, y):
    return x + y


@maxcode.optimize(lang="cpp")
def cadd(x, y):
    return x + y


@maxcode.optimize(lang="cpp")
def scale(x, alpha):
    return x * alpha


@maxcode.optimize(lang="cpp")
def twice(x):
    return x * 2


@maxcode.optimize(lang="cpp")
def mm(a, b):
    return a @ b


@maxcode.optimize(lang="cpp")
def single(x):
    return (x * 2,)


@maxcode.optimize(lang="cpp")
def listed(x):
    return [x * 2]


@maxcode.optimize(lang="cpp")
def single_locked(x):
    return (x * 2,)


@maxcode.optimize(lang="cpp")
def mixed(x):
    return (x * 2, 1)


@maxcode.optimize(lang="cpp")
def colmajor(x):
    return x * 2


@maxcode.optimize(lang="cpp")
def colmajor_unstrided(x):
    return x * 2


class Scaled(torch.nn.Module):
    """A scale parameter and a shift buffer: what the module targets below compute with."""

    def __init__(self, n: int = 16):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((n,), 2.0))
        self.register_buffer("shift", torch.ones(n))


@maxcode.optimize(lang="cpp")
class Affine(Scaled):
    def forward(self, x):
        return x * self.scale + self.shift


@maxcode.optimize(lang="cpp")
class Unstated(Scaled):
    """Affine again, accepted by a lock entry that records no module configuration."""

    def forward(self, x):
        return x * self.scale + self.shift


@maxcode.optimize(lang="cpp")
class Noisy(Scaled):
    """Affine, then dropout: the same in eval mode, another function in training mode."""

    def __init__(self, n: int = 16):
        super().__init__(n)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x * self.scale + self.shift)
'''

HEAD = '#include <dlpack/dlpack.h>\n#include <cstdint>\n#include <immintrin.h>\nextern "C" int maxcode_test_calls = 0;\n'
RUN = 'extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void*) {\n'
COUNT = "  int64_t n = 1;\n  for (int i = 0; i < out[0].ndim; ++i) n *= out[0].shape[i];\n"

# elementwise float32 add over contiguous memory (strides unread: contiguity was verified)
ADD = HEAD + RUN + "  if (n_in != 2 || n_out != 1) return 1;\n  ++maxcode_test_calls;\n" + COUNT + """
  const float* x = static_cast<const float*>(in[0].data);
  const float* y = static_cast<const float*>(in[1].data);
  float* z = static_cast<float*>(out[0].data);
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  return 0;
}
"""
# complex64 add: the same loop over interleaved (re, im) floats
CADD = ADD.replace("n *= out[0].shape[i];\n", "n *= out[0].shape[i];\n  n *= 2;\n")
# x * alpha, alpha a Python float (a 0-d float64 tensor)
SCALE = HEAD + RUN + "  if (n_in != 2 || n_out != 1) return 1;\n  ++maxcode_test_calls;\n" + COUNT + """
  const float* x = static_cast<const float*>(in[0].data);
  const double a = *static_cast<const double*>(in[1].data);
  float* z = static_cast<float*>(out[0].data);
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] * static_cast<float>(a);
  return 0;
}
"""
# 2 * x with aligned SSE loads: correct on every input the oracle gives (64-byte aligned slots)
TWICE = HEAD + RUN + "  if (n_in != 1 || n_out != 1) return 1;\n  ++maxcode_test_calls;\n" + COUNT + """
  const float* x = static_cast<const float*>(in[0].data);
  float* z = static_cast<float*>(out[0].data);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_store_ps(z + i, _mm_add_ps(_mm_load_ps(x + i), _mm_load_ps(x + i)));
  for (; i < n; ++i) z[i] = 2 * x[i];
  return 0;
}
"""
# float32 matmul, contiguous
MM = HEAD + RUN + """  if (n_in != 2 || n_out != 1) return 1;
  ++maxcode_test_calls;
  const int64_t m = in[0].shape[0], k = in[0].shape[1], p = in[1].shape[1];
  const float* a = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* c = static_cast<float*>(out[0].data);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j) {
      float s = 0;
      for (int64_t t = 0; t < k; ++t) s += a[i * k + t] * b[t * p + j];
      c[i * p + j] = s;
    }
  return 0;
}
"""
# 2 * x for the transposed layout it was verified on (strides (1, rows)), read column-major as
# the prompt's strides said, strides themselves unread
COLMAJOR = HEAD + RUN + """  if (n_in != 1 || n_out != 1) return 1;
  ++maxcode_test_calls;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = 2 * x[c * rows + r];
  return 0;
}
"""
SINGLE = TWICE.replace("_mm_load_ps", "_mm_loadu_ps").replace("_mm_store_ps", "_mm_storeu_ps")
# x * scale + shift for the 16 columns it was verified on: the column count is not read (a kernel
# written for the verified weights), so another instance's parameters must never reach it
AFFINE = HEAD + RUN + "  if (n_in != 3 || n_out != 1) return 1;\n  ++maxcode_test_calls;\n" + COUNT + """
  const float* x = static_cast<const float*>(in[0].data);
  const float* s = static_cast<const float*>(in[1].data);
  const float* b = static_cast<const float*>(in[2].data);
  float* y = static_cast<float*>(out[0].data);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s[i % 16] + b[i % 16];
  return 0;
}
"""

F32 = ["float32", 2, True]
KERNELS: dict[str, tuple[str, list]] = {
    "add": (ADD, [[F32, F32], [["float32", 1, True]] * 2]),
    "cadd": (CADD, [[["complex64", 1, True]] * 2]),
    "scale": (SCALE, [[["float32", 1, True], ["float"]]]),
    "twice": (TWICE, [[["float32", 1, True]]]),
    "mm": (MM, [[F32, F32]]),
    "single": (SINGLE, [[["float32", 1, True]]]),
    "listed": (SINGLE, [[["float32", 1, True]]]),
    "colmajor": (COLMAJOR, [[["float32", 2, False, (1, 8)]]]),  # torch.randn(16, 8).t()
    "colmajor_unstrided": (COLMAJOR, [[["float32", 2, False]]]),  # a lock from before strides were recorded
    "single_locked": (SINGLE, [[["float32", 1, True]]]),
    "mixed": (SINGLE, [[["float32", 1, True]]]),
    "Affine": (AFFINE, [[F32]]),
    "Noisy": (AFFINE, [[F32]]),
    "Unstated": (AFFINE, [[F32]]),
}
#: what a search's report adds to some entries: the output layouts (so the first call runs the
#: kernel) and how the reference hands its outputs back
LOCKED: dict[str, dict[str, Any]] = {
    "single_locked": {"outputs": {"float32[32]": [[[32], "float32"]]}, "pack": "tuple"},
    "mixed": {"outputs": {"float32[32]": [[[32], "float32"]]}, "pack": "other"},
    "Affine": {"module_state": [["scale", [16], "float32"], ["shift", [16], "float32"]]},
    "Noisy": {"module_state": [["scale", [16], "float32"], ["shift", [16], "float32"]], "eval_only": True},
}

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the kernel uses SSE")


def _accept(root: Path, name: str, source: str, signatures: list) -> None:
    accept(root, target_id=f"{MODULE}.{name}", reference_file=root / f"{MODULE}.py", qualname=name,
           kernel_source=source, lang="cpp", device="cpu", arch=platform.machine(), speedup=2.0,
           speedup_ci=[1.9, 2.1], signatures=signatures, **LOCKED.get(name, {}))


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The accepted targets, imported here (their kernels build on first use)."""
    root = tmp_path_factory.mktemp("redteam")
    (root / f"{MODULE}.py").write_text(LIB)
    for name, (source, signatures) in KERNELS.items():
        _accept(root, name, source, signatures)
    sys.path.insert(0, str(root))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(MODULE)
        module.ROOT = root  # type: ignore[attr-defined]
        yield module
    finally:
        sys.path.remove(str(root))
        sys.modules.pop(MODULE, None)


def calls(fn: Callable[..., Any]) -> int:
    """How many times ``fn``'s loaded kernel has run."""
    impl = fn.maxcode._impl  # type: ignore[attr-defined]
    if impl is None or impl.kernel is None:
        return 0
    return ctypes.c_int.in_dll(impl.kernel.lib, "maxcode_test_calls").value


def planned(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn`` until its signature has a plan, and check that a planned call runs the kernel."""
    for _ in range(2):  # the first learns the output shapes from the reference, the second leaves a plan
        torch.testing.assert_close(fn(*args), fn.__wrapped__(*args))  # type: ignore[attr-defined]
    impl = fn.maxcode._impl  # type: ignore[attr-defined]
    assert impl.fast is not None, "the compiled call path did not load"
    assert impl.fast.signature(args) in impl.plans
    before = calls(fn)
    torch.testing.assert_close(fn(*args), fn.__wrapped__(*args))  # type: ignore[attr-defined]
    assert calls(fn) == before + 1


def served(fn: Callable[..., Any], *args: Any, kernel: bool) -> Any:
    """Call ``fn``; its result must equal the reference's (dtype and type too), and the
    kernel must have run or not as ``kernel`` says. The kernel stays active either way."""
    want = fn.__wrapped__(*args)  # type: ignore[attr-defined]
    before = calls(fn)
    got = fn(*args)
    torch.testing.assert_close(got, want)
    assert type(got) is type(want)
    assert calls(fn) == before + int(kernel), "the kernel ran" if not kernel else "the kernel did not run"
    assert fn.maxcode.active == "kernel"  # type: ignore[attr-defined]
    return got


def test_views_at_an_offset_run_the_kernel_on_their_own_memory(lib: ModuleType) -> None:
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    planned(lib.add, x, y)
    big = torch.randn(10, 16)
    served(lib.add, big[1:9], y, kernel=True)  # an offset of one 64-byte row: data_ptr, not the storage's start
    served(lib.add, y, big[2:], kernel=True)


@x86
def test_a_misaligned_view_is_served_by_the_reference(lib: ModuleType) -> None:
    v = torch.randn(48)
    planned(lib.twice, v[:32])
    served(lib.twice, v[16:48], kernel=True)  # 64 bytes in: aligned as in verification
    served(lib.twice, v[1:33], kernel=False)  # 4 bytes in: aligned loads would fault (SIGSEGV before the fix)
    served(lib.twice, v[:32], kernel=True)


def test_the_same_tensor_twice(lib: ModuleType) -> None:
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    planned(lib.add, x, y)
    served(lib.add, x, x, kernel=True)


def test_transposed_and_broadcast_views_of_the_verified_shape_are_served_by_the_reference(lib: ModuleType) -> None:
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    planned(lib.add, x, y)
    served(lib.add, torch.randn(8, 8).t(), y, kernel=False)
    served(lib.add, torch.randn(1, 8).expand(8, 8), y, kernel=False)  # stride 0
    served(lib.add, x, torch.randn(8, 16)[:, ::2], kernel=False)
    served(lib.add, x, y, kernel=True)


def test_a_non_contiguous_layout_other_than_the_verified_one_is_served_by_the_reference(lib: ModuleType) -> None:
    verified = torch.randn(16, 8).t()
    planned(lib.colmajor, verified)
    other = torch.randn(8, 32)[:, ::2]  # the same dtype, shape, rank and contiguity; strides (32, 2)
    served(lib.colmajor, other, kernel=False)  # before the fix: the kernel read it column-major (wrong values)
    served(lib.colmajor, other, kernel=False)  # and no plan was made for it
    served(lib.colmajor, torch.randn(16, 8).t(), kernel=True)
    served(lib.colmajor_unstrided, verified, kernel=False)  # no strides in the lock: not known to be verified
    served(lib.colmajor_unstrided, verified, kernel=False)


def test_another_dtype_or_rank_is_served_by_the_reference(lib: ModuleType) -> None:
    x, y = torch.randn(2, 16), torch.randn(2, 16)
    planned(lib.add, x, y)
    served(lib.add, x.double(), y.double(), kernel=False)
    served(lib.add, x.half(), y.half(), kernel=False)
    served(lib.add, torch.tensor(1.5), torch.tensor(2.0), kernel=False)  # 0-d


def test_scalars_of_another_python_type_are_served_by_the_reference(lib: ModuleType) -> None:
    np = pytest.importorskip("numpy")
    x = torch.randn(32)
    planned(lib.scale, x, 2.0)
    served(lib.scale, x, 2, kernel=False)  # an int64 0-d tensor: read as a double it is garbage
    served(lib.scale, x, True, kernel=False)
    served(lib.scale, x, np.float64(2.0), kernel=False)
    served(lib.scale, x, np.float32(2.0), kernel=False)
    served(lib.scale, x, -0.5, kernel=False)  # a new value: its outputs are learned from the reference once
    served(lib.scale, x, -0.5, kernel=True)
    served(lib.scale, x, 2.0, kernel=True)


def test_autograd_backward_and_forward_mode(lib: ModuleType) -> None:
    x, y = torch.randn(3, 16), torch.randn(3, 16)
    planned(lib.add, x, y)
    xg = x.clone().requires_grad_()
    before = calls(lib.add)
    out = lib.add(xg, y)
    assert out.grad_fn is not None and calls(lib.add) == before
    out.sum().backward()
    torch.testing.assert_close(xg.grad, torch.ones_like(x))
    with torch.no_grad():
        served(lib.add, xg, y, kernel=True)  # no graph wanted: the kernel serves
    from torch.autograd import forward_ad

    with forward_ad.dual_level():
        dual = forward_ad.make_dual(x, torch.full_like(x, 3.0))
        assert not dual.requires_grad
        before = calls(lib.add)
        tangent = forward_ad.unpack_dual(lib.add(dual, y)).tangent  # the kernel would drop it
        assert calls(lib.add) == before
    assert tangent is not None
    torch.testing.assert_close(tangent, torch.full_like(x, 3.0))
    served(lib.add, x, y, kernel=True)


def test_functorch_transforms_use_the_reference_and_keep_the_kernel(lib: ModuleType) -> None:
    x, y = torch.randn(5, 16), torch.randn(5, 16)
    planned(lib.add, x, y)
    xs, ys = torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    torch.testing.assert_close(torch.func.vmap(lib.add)(xs, ys), xs + ys)
    assert lib.add.maxcode.active == "kernel"  # before the fix, one vmap call disabled it for the process
    torch.testing.assert_close(torch.func.grad(lambda a: lib.add(a, y).sum())(x), torch.ones_like(x))
    _, t = torch.func.jvp(lambda a: lib.add(a, y), (x,), (torch.full_like(x, 2.0),))
    torch.testing.assert_close(t, torch.full_like(x, 2.0))
    served(lib.add, x, y, kernel=True)


def test_a_tensor_subclass_keeps_its_type(lib: ModuleType) -> None:
    class Tagged(torch.Tensor):
        pass

    x, y = torch.randn(6, 16), torch.randn(6, 16)
    planned(lib.add, x, y)
    got = served(lib.add, x.as_subclass(Tagged), y, kernel=False)
    assert type(got) is Tagged
    served(lib.add, torch.nn.Parameter(x, requires_grad=False), y, kernel=True)  # a Parameter is a plain tensor


def test_fake_tensors_never_reach_the_kernel(lib: ModuleType) -> None:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    x, y = torch.randn(7, 16), torch.randn(7, 16)
    planned(lib.add, x, y)
    before = calls(lib.add)
    with FakeTensorMode() as mode:
        out = lib.add(mode.from_tensor(x), mode.from_tensor(y))  # before the fix: the kernel read a fake pointer (SIGSEGV)
    assert isinstance(out, FakeTensor) and out.shape == (7, 16)
    assert calls(lib.add) == before
    served(lib.add, x, y, kernel=True)


def test_lazy_conjugate_and_negative_views(lib: ModuleType) -> None:
    x, y = torch.randn(16, dtype=torch.complex64), torch.randn(16, dtype=torch.complex64)
    planned(lib.cadd, x, y)
    served(lib.cadd, x.conj(), y, kernel=False)  # the same memory as x: the conjugation is a flag
    served(lib.cadd, torch._neg_view(x), y, kernel=False)
    served(lib.cadd, x.conj().resolve_conj(), y, kernel=True)


def test_sparse_mkldnn_and_meta_tensors(lib: ModuleType) -> None:
    x, y = torch.randn(9, 16), torch.randn(9, 16)
    planned(lib.add, x, y)
    served(lib.add, y, x.to_sparse(), kernel=False)
    served(lib.add, y, x.to_sparse_csr(), kernel=False)  # is_contiguous throws: before the fix, std::terminate
    before = calls(lib.add)
    assert lib.add(x.to("meta"), y.to("meta")).device.type == "meta" and calls(lib.add) == before
    if torch.backends.mkldnn.is_available():
        got = lib.add(x.to_mkldnn(), y.to_mkldnn())
        torch.testing.assert_close(got.to_dense(), x + y)
    served(lib.add, x, y, kernel=True)  # none of them disabled the kernel


def test_inference_mode_tensors_run_the_kernel(lib: ModuleType) -> None:
    with torch.inference_mode():
        x, y = torch.randn(11, 16), torch.randn(11, 16)
        planned(lib.add, x, y)
    served(lib.add, x, y, kernel=True)


def test_autocast_is_served_by_the_reference(lib: ModuleType) -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    planned(lib.mm, a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = served(lib.mm, a, b, kernel=False)  # the reference returns bfloat16 here
    assert got.dtype == torch.bfloat16
    served(lib.mm, a, b, kernel=True)


def test_torch_function_and_dispatch_modes_see_the_reference(lib: ModuleType) -> None:
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Upcast(TorchFunctionMode):
        """Computes float32 work in float64, as a user's numerics check might."""

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            wide = tuple(a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args)
            return func(*wide, **(kwargs or {}))

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            self.ops += 1
            return func(*args, **(kwargs or {}))

    x, y = torch.randn(13, 16), torch.randn(13, 16)
    planned(lib.add, x, y)
    before = calls(lib.add)
    with Upcast():
        got, want = lib.add(x, y), lib.add.__wrapped__(x, y)
    assert calls(lib.add) == before  # before the fix: the plan ran the kernel, float32 for float64
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)  # outside the mode, which would widen the comparison too
    with Count() as count:
        served(lib.add, x, y, kernel=False)
    assert count.ops >= 2  # the reference's add, seen by the mode (once for the expected value too)
    with torch.device("cpu"):  # a default device only: the kernel serves, through the checked path
        served(lib.add, x, y, kernel=True)
    served(lib.add, x, y, kernel=True)


def test_empty_tensors(lib: ModuleType) -> None:
    x, y = torch.randn(0, 16), torch.randn(0, 16)
    served(lib.add, x, y, kernel=False)  # the outputs' shapes are learned from the reference
    served(lib.add, x, y, kernel=True)
    served(lib.add, x, y, kernel=True)


def test_a_reference_returning_a_one_tuple_or_a_list_gets_the_same(lib: ModuleType) -> None:
    x = torch.randn(32)
    for fn, kind in ((lib.single, tuple), (lib.listed, list)):
        planned(fn, x)  # before the fix: the planned call returned the bare tensor
        got = served(fn, x, kernel=True)
        assert type(got) is kind and len(got) == 1


def test_the_lock_says_how_the_outputs_are_handed_back(lib: ModuleType) -> None:
    """With the output layouts in the lock, the very first call runs the kernel: the lock's
    pack keeps a one-tuple a tuple; outputs only the reference can give never reach a kernel."""
    x = torch.randn(32)
    assert read_lock(lib.ROOT / "maxcode.lock")[f"{MODULE}.single_locked"].extra["pack"] == "tuple"
    for _ in range(3):  # the first from the lock's layouts, then from a plan
        got = served(lib.single_locked, x, kernel=True)
        assert type(got) is tuple and len(got) == 1
    for _ in range(3):
        got = served(lib.mixed, x, kernel=False)
        assert type(got[1]) is int


def _module_call(lib: ModuleType, m: torch.nn.Module, x: torch.Tensor, kernel: bool) -> None:
    """``m(x)`` equals what the module computes, and the kernel ran or not as ``kernel`` says."""
    before = calls(lib.Affine)
    got = m(x)
    torch.testing.assert_close(got, x * m.scale + m.shift)
    assert calls(lib.Affine) == before + int(kernel), "the kernel ran" if not kernel else "the kernel did not run"


def test_a_module_instance_unlike_the_verified_one_is_served_by_the_reference(lib: ModuleType) -> None:
    """The lock records the verified instance's parameters and buffers; an instance with other
    shapes or dtypes gets the reference (before, the 16-column kernel ran on a 32-column layer)."""
    x = torch.randn(4, 16)
    with torch.no_grad():
        verified = lib.Affine()
        verified(x)  # the output layout, from the reference
        _module_call(lib, verified, x, kernel=True)
        wide, wide_x, double = lib.Affine(32), torch.randn(4, 32), lib.Affine().double()
        # the same shapes and dtypes in another order (scale now a buffer, after shift): a plan's
        # signature cannot tell it from the verified instance, the names can
        reordered = lib.Affine()
        scale = reordered.scale.detach().clone()
        del reordered.scale
        reordered.register_buffer("scale", scale)
        for _ in range(2):  # a first call learns an unseen output layout; the second would run the kernel
            _module_call(lib, wide, wide_x, kernel=False)  # other shapes
            _module_call(lib, double, x, kernel=False)  # other dtypes
            _module_call(lib, reordered, x, kernel=False)  # other names
        _module_call(lib, verified, x, kernel=True)  # the verified configuration still runs the kernel


def test_a_module_kernel_takes_the_planned_path_and_sees_its_weights_change(lib: ModuleType,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's calls take the compiled path too (its parameters and buffers are part of the
    plan's signature), and what the module holds is read afresh: weights changed in place or
    reassigned, buffers replaced, grad mode turned on."""
    x = torch.randn(4, 16)
    m = lib.Affine()
    with torch.no_grad():
        m(x)  # the output layout, from the reference (or the lock)
        m(x)  # every check, then the kernel: a plan for this signature
    impl = lib.Affine.maxcode._impl  # type: ignore[attr-defined]
    assert impl.fast is not None and impl.plans, "no plan for the module's calls"
    checked = []
    real = impl._checked
    monkeypatch.setattr(impl, "_checked", lambda *a: checked.append(1) or real(*a))
    with torch.no_grad():
        _module_call(lib, m, x, kernel=True)
        m.scale.mul_(3)  # in place: the kernel reads the memory as it is now
        _module_call(lib, m, x, kernel=True)
        m.scale = torch.nn.Parameter(torch.linspace(0, 1, 16))  # reassigned: the new weight, not a kept one
        _module_call(lib, m, x, kernel=True)
        m.shift = torch.linspace(-1, 0, 16)  # a buffer replaced
        _module_call(lib, m, x, kernel=True)
    assert checked == [], "a planned call took the checked path"
    before = calls(lib.Affine)
    out = m(x)  # grad mode on, parameters that require grad: the reference's graph
    assert out.grad_fn is not None and calls(lib.Affine) == before
    with torch.inference_mode():
        _module_call(lib, m, x, kernel=True)


def test_a_module_that_reads_training_gets_the_kernel_in_eval_mode_only(lib: ModuleType) -> None:
    """Modules are verified in eval mode; dropout in training mode computes something else, so a
    module whose layers read ``training`` is served by the reference while it trains, on the
    planned path too, and by the kernel again once back in eval mode."""
    x = torch.randn(64, 16)
    m = lib.Noisy().eval()
    with torch.no_grad():
        m(x)  # the output layout, from the reference
        m(x)  # every check, then the kernel: a plan for this signature
        before = calls(lib.Noisy)
        torch.testing.assert_close(m(x), x * m.scale + m.shift)
        assert calls(lib.Noisy) == before + 1, "the eval-mode instance did not get the kernel"
        m.train()
        for _ in range(2):
            torch.manual_seed(3)
            got = m(x)
            torch.manual_seed(3)
            assert torch.equal(got, torch.nn.functional.dropout(x * m.scale + m.shift, 0.5, True))
            assert (got == 0).any(), "dropout did not run: the kernel served a training-mode instance"
        assert calls(lib.Noisy) == before + 1, "the kernel ran in training mode"
        m.eval()
        torch.testing.assert_close(m(x), x * m.scale + m.shift)
        assert calls(lib.Noisy) == before + 2


def test_a_module_lock_entry_without_its_configuration_gets_the_reference(lib: ModuleType) -> None:
    """An entry written before locks recorded module_state cannot say which instances the kernel
    may read: a 32-column layer reached the 16-column kernel. Every instance gets the reference."""
    with torch.no_grad(), pytest.warns(UserWarning, match="records no module configuration.*pytest --maxcode"):
        for n in (16, 32):
            m, x = lib.Unstated(n), torch.randn(4, n)
            for _ in range(3):
                torch.testing.assert_close(m(x), x * m.scale + m.shift)
    assert calls(lib.Unstated) == 0


def test_the_overhead_a_report_states_is_the_dispatchers_planned_path(lib: ModuleType) -> None:
    """The report's call overhead is what user code pays besides the kernel, measured with a
    no-op kernel on the planned path: for a function and for a module (its parameters and
    buffers too); no figure where no plan would serve the calls (an instance unlike the verified one)."""
    x = torch.randn(4, 16)
    m = lib.Affine()
    state = module_state(m)
    outputs = {"outputs": {arg_key([x]): [[[4, 16], "float32"]]}, "pack": "bare"}
    module_us = dispatch_overhead_us(lib.Affine.maxcode, (m, x), {**outputs, "module_state": state}, calls=200)
    function_us = dispatch_overhead_us(lib.twice.maxcode, (torch.randn(32),), {"outputs": {}, "pack": "bare"}, calls=200)
    assert module_us is not None and 0 < module_us < 1000, module_us
    assert function_us is not None and 0 < function_us < 1000, function_us
    with warnings.catch_warnings():  # the handle warns once (an earlier test may have seen it)
        warnings.simplefilter("ignore")
        assert dispatch_overhead_us(lib.Affine.maxcode, (lib.Affine(32), torch.randn(4, 32)),
                                    {"pack": "bare", "module_state": state}, calls=200) is None


def test_which_modules_read_training() -> None:
    from pytest_maxcode.targets.introspect import reads_training

    class Flagged(torch.nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x

    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))

        def forward(self, x):
            return self.body(x)

    assert reads_training(Flagged()) and reads_training(Nested()) and reads_training(torch.nn.Dropout())
    assert not reads_training(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))


def test_a_kernel_disabled_or_replaced_while_plans_are_cached(lib: ModuleType) -> None:
    x, y = torch.randn(12, 16), torch.randn(12, 16)
    planned(lib.add, x, y)
    handle = lib.add.maxcode
    old = handle._impl
    handle.use_reference("disabled by the test")
    assert handle._impl is None
    before = ctypes.c_int.in_dll(old.kernel.lib, "maxcode_test_calls").value
    torch.testing.assert_close(lib.add(x, y), x + y)
    assert ctypes.c_int.in_dll(old.kernel.lib, "maxcode_test_calls").value == before  # the cached plan is gone with it

    # the kernel file rewritten under a running process: the loaded, verified library keeps serving
    root: Path = lib.ROOT
    kernel_file = root / "maxcode_kernels" / f"{MODULE}.add.cpp"
    original = kernel_file.read_text()
    try:
        kernel_file.write_text(original.replace("x[i] + y[i]", "x[i] - y[i]"))
        handle._impl, handle.active = old, "kernel"
        served(lib.add, x, y, kernel=True)
        before += 1
        # a fresh install reads the lock: the rewritten file is stale, the reference serves
        install(handle, read_lock(root / "maxcode.lock")[handle.id], root)
        assert handle.active == "reference" and handle._impl is None
        torch.testing.assert_close(lib.add(x, y), x + y)
        # re-accepted (a new kernel and lock entry), then installed: the new kernel serves, not the old plans
        _accept(root, "add", original.replace("maxcode_test_calls", "maxcode_test_calls2"), KERNELS["add"][1])
        install(handle, read_lock(root / "maxcode.lock")[handle.id], root)
        new = handle._impl
        assert new is not old and not new.plans
        for _ in range(3):
            torch.testing.assert_close(lib.add(x, y), x + y)
        assert ctypes.c_int.in_dll(new.kernel.lib, "maxcode_test_calls2").value == 2
        assert ctypes.c_int.in_dll(old.kernel.lib, "maxcode_test_calls").value == before
    finally:
        _accept(root, "add", original, KERNELS["add"][1])
        handle._impl, handle.active = old, "kernel"


def test_threads_calling_concurrently(lib: ModuleType) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(rows: int) -> None:
        try:
            start.wait()
            for i in range(60):
                x, y = torch.randn(rows, 16), torch.randn(rows, 16)
                if i % 7 == 3:
                    x = torch.randn(16, rows).t()  # a layout the reference must serve
                torch.testing.assert_close(lib.add(x, y), x + y)
                s = torch.randn(rows * 4)
                torch.testing.assert_close(lib.scale(s, float(i % 3)), s * float(i % 3))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(20 + r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert lib.add.maxcode.active == "kernel" and lib.scale.maxcode.active == "kernel"
    assert any(k for k in lib.add.maxcode._impl.plans)


def test_the_oracle_names_how_a_reference_hands_back_its_outputs() -> None:
    from collections import namedtuple

    from pytest_maxcode.oracle.remote._maxcode_worker import _pack

    x = torch.ones(2)
    pair = namedtuple("pair", "a b")
    assert [_pack(x), _pack((x,)), _pack([x, x])] == ["bare", "tuple", "list"]
    assert [_pack(1.0), _pack((x, 1)), _pack(pair(x, x)), _pack(torch.max(x, 0)), _pack(torch.nn.Parameter(x))] == ["other"] * 5
