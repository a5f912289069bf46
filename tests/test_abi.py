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
