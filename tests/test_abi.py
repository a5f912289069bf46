"""The native ABI's marshalling: DLTensor fields exactly as DESIGN.md section 4 fixes them."""

from __future__ import annotations

import ctypes

import pytest
import torch

from pytest_maxcode.native import abi


def test_dltensor_layout_matches_dlpack_header() -> None:
    # the C struct is 48 bytes on 64-bit platforms: a wrong field would shift everything after it
    assert ctypes.sizeof(abi.DLTensor) == 48
    assert abi.DLTensor.shape.offset == 24 and abi.DLTensor.byte_offset.offset == 40


@pytest.mark.parametrize(
    "dtype, code, bits",
    [
        (torch.float32, abi.KDL_FLOAT, 32),
        (torch.float16, abi.KDL_FLOAT, 16),
        (torch.bfloat16, abi.KDL_BFLOAT, 16),
        (torch.float64, abi.KDL_FLOAT, 64),
        (torch.int64, abi.KDL_INT, 64),
        (torch.uint8, abi.KDL_UINT, 8),
        (torch.bool, abi.KDL_BOOL, 8),
    ],
)
def test_dtype_codes(dtype: torch.dtype, code: int, bits: int) -> None:
    arr = abi.TensorArray([torch.zeros(3, dtype=dtype)])
    d = arr.array[0]
    assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (code, bits, 1)


def test_strides_are_in_elements_and_data_points_at_the_view() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base[1:, ::2]  # offset into storage, non-contiguous
    arr = abi.TensorArray([view])
    d = arr.array[0]
    assert d.ndim == 2
    assert [d.shape[i] for i in range(2)] == [3, 3]
    assert [d.strides[i] for i in range(2)] == [6, 2]
    assert d.byte_offset == 0
    assert d.data == view.data_ptr()
    assert ctypes.c_float.from_address(d.data).value == 6.0
    assert (d.device.device_type, d.device.device_id) == (abi.KDL_CPU, 0)


def test_scalars_become_zero_dim_tensors() -> None:
    out = abi.as_abi_tensors([torch.ones(2), 3, 2.5, True])
    assert [t.dtype for t in out[1:]] == [torch.int64, torch.float64, torch.bool]
    assert all(t.dim() == 0 for t in out[1:])
    assert out[1].item() == 3 and out[2].item() == 2.5 and out[3].item() is True


def test_unsupported_argument_is_a_clear_error() -> None:
    with pytest.raises(abi.AbiError, match="argument 1 is a str"):
        abi.as_abi_tensors([torch.ones(1), "relu"])


def test_kernel_round_trip(tmp_path) -> None:
    """Build a tiny kernel with g++ and call it through the ABI."""
    import subprocess

    from pytest_maxcode.native.build import INCLUDE_DIR

    src = tmp_path / "k.cpp"
    src.write_text(
        "#include <dlpack/dlpack.h>\n#include <cstdint>\n"
        'extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {\n'
        "  if (s != nullptr || n_in != 2 || n_out != 1) return 7;\n"
        "  const float* x = (const float*)in[0].data; double a = *(const double*)in[1].data;\n"
        "  float* y = (float*)out[0].data;\n"
        "  for (int64_t i = 0; i < in[0].shape[0]; ++i) y[i] = x[i * in[0].strides[0]] * (float)a;\n"
        "  return 0;\n}\n"
    )
    lib = tmp_path / "k.so"
    subprocess.run(["g++", "-shared", "-fPIC", f"-I{INCLUDE_DIR}", str(src), "-o", str(lib)], check=True)
    kernel = abi.NativeKernel(str(lib))
    x = torch.arange(10, dtype=torch.float32)[::2]
    out = torch.empty(5)
    rc = kernel.run(abi.TensorArray(abi.as_abi_tensors([x, 3.0])), abi.TensorArray([out]))
    assert rc == 0
    assert torch.equal(out, x * 3)


# Writes what it was given into out[0] (int64): per input and output its descriptor fields,
# its data pointer (tensors) or value bytes (0-d scalars made by the path); rc 5 when asked.
DESCRIBE = r"""
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstring>
static int64_t* put;
static void describe(const DLTensor& t, bool value) {
  *put++ = t.dtype.code; *put++ = t.dtype.bits; *put++ = t.dtype.lanes;
  *put++ = t.device.device_type; *put++ = t.device.device_id; *put++ = t.ndim; *put++ = (int64_t)t.byte_offset;
  for (int i = 0; i < t.ndim; ++i) { *put++ = t.shape[i]; *put++ = t.strides[i]; }
  int64_t v = 0;
  if (value) std::memcpy(&v, t.data, t.dtype.bits / 8 < 8 ? t.dtype.bits / 8 : 8);
  *put++ = value ? v : (int64_t)(intptr_t)t.data;
}
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  put = static_cast<int64_t*>(out[0].data);
  *put++ = n_in; *put++ = n_out; *put++ = (int64_t)(intptr_t)s;
  for (int i = 0; i < n_in; ++i) describe(in[i], in[i].ndim == 0);
  for (int i = 1; i < n_out; ++i) describe(out[i], false);
  if (n_in > 0 && in[0].ndim == 0 && in[0].dtype.code == kDLInt && *(const int64_t*)in[0].data == 5) return 5;
  return 0;
}
"""


@pytest.fixture(scope="module")
def describe(tmp_path_factory: pytest.TempPathFactory) -> abi.NativeKernel:
    import subprocess

    from pytest_maxcode.native import callpath
    from pytest_maxcode.native.build import INCLUDE_DIR

    assert callpath.load() is not None, callpath.fallback_reason()  # built once per torch version, cached
    d = tmp_path_factory.mktemp("describe")
    (d / "k.cpp").write_text(DESCRIBE)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", f"-I{INCLUDE_DIR}", str(d / "k.cpp"), "-o", str(d / "k.so")], check=True)
    return abi.NativeKernel(str(d / "k.so"))


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8,
          torch.bool, torch.complex64]


def _inputs(n: int, dtype: torch.dtype) -> list:
    base = torch.zeros(6, 8, dtype=dtype)
    shapes = [base, base.t(), base[1:, ::2], torch.zeros((), dtype=dtype)]  # contiguous, transposed, sliced, 0-d
    return shapes[:n]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_compiled_path_describes_what_the_ctypes_path_describes(describe: abi.NativeKernel, dtype: torch.dtype,
                                                                    n: int) -> None:
    args = _inputs(n, dtype)
    extras = [torch.ones(3, dtype=torch.float32)]
    meta = [((128,), torch.int64), ((2, 3), dtype)]
    old = abi.call_native_ctypes(describe, args, extras, meta, torch.device("cpu"))
    new = abi.call_native(describe, args, extras, meta, torch.device("cpu"))
    # the outputs' own pointers differ (fresh allocations): compare everything before them
    n_fields = 3 + sum(8 + 2 * t.dim() for t in [*args, *extras]) + 7 + 2 * 2
    assert torch.equal(old[0][:n_fields], new[0][:n_fields])
    assert int(new[0][0]) == n + 1 and int(new[0][1]) == 2
    assert [(o.shape, o.dtype, o.is_contiguous()) for o in new] == [(o.shape, o.dtype, o.is_contiguous()) for o in old]


def test_scalars_go_through_both_paths_alike(describe: abi.NativeKernel) -> None:
    args = [torch.ones(4), 3, 2.5, True, -7]
    meta = [((64,), torch.int64)]
    old = abi.call_native_ctypes(describe, args, [], meta, "cpu")[0]
    new = abi.call_native(describe, args, [], meta, "cpu")[0]
    assert torch.equal(old[:45], new[:45])  # 3 + 10 for the tensor + 8 per scalar
    assert int(new[3 + 10 + 7]) == 3  # the int's value reached the kernel as an int64 0-d tensor


def test_writing_into_given_outputs_is_the_same_call(describe: abi.NativeKernel) -> None:
    args = _inputs(3, torch.float32)
    got, want = torch.zeros(64, dtype=torch.int64), torch.zeros(64, dtype=torch.int64)
    assert abi.call_into(describe, args, [], [got], [((4, 4), torch.float32)], "cpu") == 0
    describe.run(abi.TensorArray(args), abi.TensorArray([want]))
    assert torch.equal(got, want)


def test_both_paths_raise_the_same_errors(describe: abi.NativeKernel) -> None:
    for call in (abi.call_native, abi.call_native_ctypes):
        with pytest.raises(abi.KernelError, match="returned 5") as e:
            call(describe, [5], [], [((64,), torch.int64)], "cpu")
        assert e.value.rc == 5
        with pytest.raises(abi.AbiError, match="argument 1 is a str"):
            call(describe, [torch.ones(1), "relu"], [], [((64,), torch.int64)], "cpu")
        with pytest.raises(abi.AbiError, match="no DLPack code"):
            call(describe, [torch.ones(1, dtype=torch.float8_e4m3fn)], [], [((64,), torch.int64)], "cpu")


def test_the_compiled_path_costs_a_fraction_of_the_ctypes_path(describe: abi.NativeKernel) -> None:
    """Not a speed bar for this loaded machine: only that the compiled path is the cheaper one,
    by a margin no scheduling noise closes (about 1 µs against about 9)."""
    import time

    from pytest_maxcode.native import callpath

    noop = abi.NativeKernel.at_address(callpath.load().noop_address())
    args, meta = _inputs(4, torch.float32), [((6, 8), torch.float32)]

    def best(call) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(500):
                call(noop, args, [], meta, "cpu")
            runs.append(time.perf_counter_ns() - t0)
        return min(runs)

    assert best(abi.call_native) * 2 < best(abi.call_native_ctypes)
