"""The native candidate ABI: DLTensor marshalling and the ctypes loader.

Standalone on purpose: the sandboxed worker loads this file by path (it imports
nothing from the package), and the runtime dispatcher imports it as
``pytest_maxcode.native.abi``: one marshalling for the oracle and for user code. Only the standard library and torch.

Two implementations of one call: the compiled helper (``callpath.cpp``, built by trusted
code in ``callpath.py`` and handed in with :func:`use_helper`) and, where it is not
available, ``struct`` packing plus ``ctypes``. Both describe the same tensors the same way.

    extern "C" int maxcode_run(const DLTensor* inputs, int32_t n_inputs,
                               DLTensor* outputs, int32_t n_outputs, void* stream);
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import struct
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.types import Device

#: an output to allocate: its shape and dtype
OutMeta = tuple[Sequence[int], torch.dtype]

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


def dtype_code(dtype: object) -> tuple[int, int]:
    try:
        return _DTYPE_CODES[str(dtype)]
    except KeyError:
        raise AbiError(f"dtype {dtype} has no DLPack code that maxcode_run accepts") from None


def as_abi_tensors(values: Sequence[object], device: Device = None) -> list[torch.Tensor]:
    """Map the reference's arguments to tensors: Python scalars become 0-d tensors.

    int -> int64, float -> float64, bool -> bool, as DESIGN.md section 4 fixes.
    """
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


# DLTensor as packed bytes: data, device{type,id}, ndim, dtype{code,bits,lanes}, shape*, strides*, byte_offset
_DLTENSOR = struct.Struct("<QiiiBBHQQQ")
assert _DLTENSOR.size == ctypes.sizeof(DLTensor) == 48
_BY_RANK: dict[int, struct.Struct] = {}
_BY_DTYPE: dict[torch.dtype, tuple[int, int]] = {}


def _dims(ndim: int) -> struct.Struct:
    """The shape then the strides of a rank-``ndim`` tensor, as int64s."""
    packer = _BY_RANK.get(ndim)
    if packer is None:
        packer = _BY_RANK[ndim] = struct.Struct(f"<{2 * ndim}q")
    return packer


def _code(dtype: torch.dtype) -> tuple[int, int]:
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        _BY_DTYPE[dtype] = dtype_code(dtype)
        return _BY_DTYPE[dtype]


class TensorArray:
    """A C array of DLTensor describing ``tensors``, in one buffer with their shapes and strides.

    Packed with ``struct`` rather than built from ctypes objects: this runs on every
    dispatched call, and ctypes structs cost tens of microseconds where this costs a few.
    """

    __slots__ = ("_keep", "address", "buffer", "count")

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        n = len(tensors)
        self.count = n
        dims = [t.dim() for t in tensors]
        size = 48 * max(n, 1) + 16 * sum(dims)
        buf = ctypes.create_string_buffer(size)
        base = ctypes.addressof(buf)
        extra = 48 * n
        pack = _DLTENSOR.pack_into
        for i, t in enumerate(tensors):
            code, bits = _code(t.dtype)
            if t.is_cuda:
                dev_type, dev_id = KDL_CUDA, t.get_device()
            elif t.is_cpu:
                dev_type, dev_id = KDL_CPU, 0
            else:
                raise AbiError(f"tensor {i} is on {t.device}; maxcode_run takes cpu or cuda tensors")
            ndim = dims[i]
            shape_at = extra
            strides_at = extra + 8 * ndim
            if ndim:
                _dims(ndim).pack_into(buf, shape_at, *t.shape, *t.stride())
            extra = strides_at + 8 * ndim
            pack(buf, 48 * i, t.data_ptr(), dev_type, dev_id, ndim, code, bits, 1,
                 base + shape_at if ndim else 0, base + strides_at if ndim else 0, 0)
        self.buffer = buf
        self.address = base
        self._keep = tensors  # the memory the descriptors point into

    @property
    def array(self) -> ctypes.Array[DLTensor]:
        """A typed view, for inspection (tests, debugging); the call itself uses ``address``."""
        return (DLTensor * max(self.count, 1)).from_buffer(self.buffer)


_RUN_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32,
                             ctypes.c_void_p)


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
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
        self.fn = fn
        #: the entry point's address, which the compiled call path calls
        self.address: int = ctypes.cast(fn, ctypes.c_void_p).value or 0

    @classmethod
    def at_address(cls, address: int) -> NativeKernel:
        """A ``maxcode_run`` already in this process (the helper's no-op, for measuring the path)."""
        kernel = cls.__new__(cls)
        kernel.path = ""
        kernel.lib = None
        kernel.fn = _RUN_TYPE(address)
        kernel.address = address
        return kernel

    def run(self, inputs: TensorArray, outputs: TensorArray, stream: int | None = None) -> int:
        return self.fn(inputs.address, inputs.count, outputs.address, outputs.count, stream)


class KernelError(RuntimeError):
    """maxcode_run returned non-zero."""

    def __init__(self, rc: int) -> None:
        super().__init__(f"maxcode_run returned {rc}")
        self.rc = rc


_HELPER: list[types.ModuleType] = []  # the compiled call path, once use_helper has loaded it


def use_helper(path: str) -> types.ModuleType:
    """Load the compiled call path from ``path`` (a sealed copy the trusted side verified);
    from then on :func:`call_native` and :func:`call_into` go through it. Raises ImportError
    or OSError when it does not load (the ctypes path then stays). It links against torch's
    libraries, which this module's ``import torch`` has loaded."""
    if _HELPER:
        return _HELPER[0]
    loader = importlib.machinery.ExtensionFileLoader("_maxcode_call", path)
    spec = importlib.util.spec_from_file_location("_maxcode_call", path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot load the call-path helper from {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.set_abi_error(AbiError)
    _HELPER.append(module)
    return module


def helper() -> types.ModuleType | None:
    """The compiled call path, or None (ctypes then)."""
    return _HELPER[0] if _HELPER else None


def call_native(
    kernel: NativeKernel,
    args: Sequence[object],
    extras: Sequence[torch.Tensor],
    out_meta: Sequence[OutMeta],
    device: Device,
    stream: int | None = None,
) -> list[torch.Tensor]:
    """One call as users pay for it: allocate the outputs, marshal, run.

    The runtime dispatcher calls this, and the oracle times this same function, so a
    reported speedup includes allocation and marshalling, not just the kernel.
    ``out_meta``: (shape, torch.dtype) tuples.
    """
    if _HELPER:
        outs = _HELPER[0].run(kernel.address, args, extras, out_meta, device, stream)
        if outs.__class__ is int:
            raise KernelError(outs)
        return outs
    return call_native_ctypes(kernel, args, extras, out_meta, device, stream)


def call_into(kernel: NativeKernel, args: Sequence[object], extras: Sequence[torch.Tensor], outs: Sequence[torch.Tensor],
              alloc_meta: Sequence[OutMeta] | None, device: Device, stream: int | None = None) -> int:
    """A call that writes into ``outs``; ``alloc_meta``'s tensors are allocated and dropped
    first, so it costs what :func:`call_native` costs. Returns the kernel's code.

    Seven parameters because it is on the accepted kernel's call path: they go straight on to
    the helper's ``run_into``, and an object to group them would be one allocation per call."""
    if _HELPER:
        return _HELPER[0].run_into(kernel.address, args, extras, outs, alloc_meta, device, stream)
    for shape, dtype in alloc_meta or ():
        torch.empty(shape, dtype=dtype, device=device)
    return kernel.run(TensorArray(as_abi_tensors(args, device) + list(extras)), TensorArray(outs), stream)


def call_native_ctypes(
    kernel: NativeKernel,
    args: Sequence[object],
    extras: Sequence[torch.Tensor],
    out_meta: Sequence[OutMeta],
    device: Device,
    stream: int | None = None,
) -> list[torch.Tensor]:
    """:func:`call_native` through ``struct`` and ``ctypes``: where the helper is not built."""
    outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in out_meta]
    rc = kernel.run(TensorArray(as_abi_tensors(args, device) + list(extras)), TensorArray(outs), stream)
    if rc != 0:
        raise KernelError(rc)
    return outs
