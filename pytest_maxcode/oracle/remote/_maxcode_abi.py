"""The native candidate ABI: DLTensor marshalling and the ctypes loader.

Standalone on purpose: the worker process imports this file by path (it imports
nothing else from the package), and the runtime dispatcher imports it as
``pytest_maxcode.oracle.remote._maxcode_abi``. Only the standard library and torch.

    extern "C" int maxcode_run(const DLTensor* inputs, int32_t n_inputs,
                               DLTensor* outputs, int32_t n_outputs, void* stream);
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

ENTRY_POINT = "maxcode_run"

KDL_CPU = 1
KDL_CUDA = 2

KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_COMPLEX = 5
KDL_BOOL = 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DTYPE_CODES: dict[str, tuple[int, int]] = {
    "torch.float16": (KDL_FLOAT, 16),
    "torch.float32": (KDL_FLOAT, 32),
    "torch.float64": (KDL_FLOAT, 64),
    "torch.bfloat16": (KDL_BFLOAT, 16),
    "torch.int8": (KDL_INT, 8),
    "torch.int16": (KDL_INT, 16),
    "torch.int32": (KDL_INT, 32),
    "torch.int64": (KDL_INT, 64),
    "torch.uint8": (KDL_UINT, 8),
    "torch.uint16": (KDL_UINT, 16),
    "torch.uint32": (KDL_UINT, 32),
    "torch.uint64": (KDL_UINT, 64),
    "torch.bool": (KDL_BOOL, 8),
    "torch.complex64": (KDL_COMPLEX, 64),
    "torch.complex128": (KDL_COMPLEX, 128),
}


class AbiError(TypeError):
    """An argument that the native ABI cannot carry."""


def dtype_code(dtype: Any) -> tuple[int, int]:
    try:
        return _DTYPE_CODES[str(dtype)]
    except KeyError:
        raise AbiError(f"dtype {dtype} has no DLPack code that maxcode_run accepts") from None


def as_abi_tensors(values: Sequence[Any], device: Any = None) -> list[Any]:
    """Map the reference's arguments to tensors: Python scalars become 0-d tensors.

    int -> int64, float -> float64, bool -> bool, as DESIGN.md section 4 fixes.
    """
    import torch

    out = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, bool):
            out.append(torch.tensor(v, dtype=torch.bool, device=device))
        elif isinstance(v, int):
            out.append(torch.tensor(v, dtype=torch.int64, device=device))
        elif isinstance(v, float):
            out.append(torch.tensor(v, dtype=torch.float64, device=device))
        else:
            raise AbiError(
                f"argument {i} is a {type(v).__name__}; the native ABI carries tensors and "
                "int/float/bool scalars only (use a compat candidate for other arguments)"
            )
    return out


class TensorArray:
    """A C array of DLTensor describing ``tensors``; keeps shape/stride storage alive.

    Built once per set of buffers: the data pointers are read when it is built, so the
    harness refills buffers in place rather than rebuilding the array in timed code.
    """

    __slots__ = ("array", "count", "_keep")

    def __init__(self, tensors: Sequence[Any]) -> None:
        n = len(tensors)
        self.count = n
        self.array = (DLTensor * max(n, 1))()
        keep = []
        for i, t in enumerate(tensors):
            code, bits = dtype_code(t.dtype)
            ndim = t.dim()
            shape = (ctypes.c_int64 * max(ndim, 1))(*t.shape)
            strides = (ctypes.c_int64 * max(ndim, 1))(*t.stride())
            keep.append((shape, strides, t))
            d = self.array[i]
            d.data = t.data_ptr() or None
            if t.device.type == "cuda":
                d.device = DLDevice(KDL_CUDA, t.device.index or 0)
            elif t.device.type == "cpu":
                d.device = DLDevice(KDL_CPU, 0)
            else:
                raise AbiError(f"tensor {i} is on {t.device}; maxcode_run takes cpu or cuda tensors")
            d.ndim = ndim
            d.dtype = DLDataType(code, bits, 1)
            d.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            d.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
            d.byte_offset = 0
        self._keep = keep


class NativeKernel:
    """A built candidate loaded with ctypes (RTLD_LOCAL, so two candidates never clash)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        try:
            fn = getattr(self.lib, ENTRY_POINT)
        except AttributeError:
            raise AbiError(
                f'the candidate defines no extern "C" {ENTRY_POINT}(const DLTensor*, int32_t, '
                "DLTensor*, int32_t, void*)"
            ) from None
        fn.restype = ctypes.c_int
        fn.argtypes = [
            ctypes.POINTER(DLTensor),
            ctypes.c_int32,
            ctypes.POINTER(DLTensor),
            ctypes.c_int32,
            ctypes.c_void_p,
        ]
        self.fn = fn

    def run(self, inputs: TensorArray, outputs: TensorArray, stream: int | None = None) -> int:
        return self.fn(inputs.array, inputs.count, outputs.array, outputs.count, stream)
