"""Runtime dispatch to an accepted kernel, with every way back to the reference.

The kernel runs only when its lock entry is current (reference and kernel hashes
match), the arguments are laid out as in verification (dtypes, ranks, contiguity,
alignment), the tensors are on the verified device and plain (no subclass, lazy view,
functorch wrapper or dual tensor), and neither autograd, autocast nor a torch function or
dispatch mode is involved. Anything else, or any failure to build, load or run, warns once
and calls the reference.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import operator
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .handle import TargetHandle
from .lock import LOCK_NAME, LockEntry

if TYPE_CHECKING:
    import torch

    from ..native.abi import NativeKernel, OutMeta
    from ..native.build import BuildResult


def entry_state(entry: LockEntry, root: Path, reference_hash: str | None) -> tuple[str, str]:
    """``active``, ``stale``, ``missing`` or ``device-mismatch``, and why (``maxcode status``)."""
    kernel = root / entry.kernel
    if not kernel.is_file():
        return "missing", f"{entry.kernel} does not exist"
    if hashlib.sha256(kernel.read_bytes()).hexdigest() != entry.kernel_hash:
        return "stale", f"{entry.kernel} changed since it was verified"
    if reference_hash is None:
        return "stale", "the reference's source cannot be found"
    if reference_hash != entry.reference_hash:
        return "stale", "the reference changed since the kernel was verified"
    if entry.device == "cuda":
        try:
            import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

            if not torch.cuda.is_available():
                return "device-mismatch", "verified on CUDA; no GPU here"
            # loaded with the first kernel, not with the package: keeps start-up fast
            from ..native.build import cuda_arch

            if entry.arch and entry.arch != cuda_arch():
                return "device-mismatch", f"verified on {entry.arch}; this GPU is {cuda_arch()}"
        except ImportError:
            return "device-mismatch", "verified on CUDA; torch is not installed"
    return "active", f"{entry.kernel}: {entry.speedup:.3g}x, verified {entry.date}"


def install(handle: TargetHandle, entry: LockEntry, root: Path) -> None:
    try:
        current: str | None = handle.reference_hash()
    except (OSError, TypeError):
        current = None
    state, why = entry_state(entry, root, current)
    if state != "active":
        if state == "stale":
            handle.warn_once("stale", f"{why}; falling back to the reference (re-run pytest --maxcode)")
        elif state == "missing":
            # the lock promises a kernel that is not there (not committed, deleted, a partial checkout)
            handle.warn_once("missing", f"the accepted kernel {why}; falling back to the reference "
                                        "(restore it, or re-run pytest --maxcode --maxcode-apply)")
        handle.use_reference(f"{state}: {why}")
        return
    if entry.lang == "py":
        handle._impl = CompatDispatcher(handle, entry, root)
    else:
        handle._impl = NativeDispatcher(handle, entry, root)
    handle.active = "kernel"
    handle.reason = why


_TRACED: list[NativeDispatcher | CompatDispatcher] = []


def _write_trace() -> None:
    path = os.environ.get("MAXCODE_TRACE")
    if path and _TRACED:
        counts: dict[str, int] = {}
        for d in _TRACED:
            counts[d.handle.id] = counts.get(d.handle.id, 0) + d.calls
        with open(path, "a") as f:
            f.write(json.dumps(counts) + "\n")


atexit.register(_write_trace)


def arg_key(values: Sequence[object]) -> str:
    """The input signature that fixes output shapes: ``float32[64,1024]|float32[1024]|float=0.5``."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    parts = []
    for v in values:
        if isinstance(v, torch.Tensor):
            parts.append(f"{str(v.dtype).replace('torch.', '')}[{','.join(map(str, v.shape))}]")
        else:
            parts.append(f"{type(v).__name__}={v!r}")
    return "|".join(parts)


def install_forced(handle: TargetHandle, spec: dict[str, Any]) -> None:
    """Make a candidate active without a lock entry: how verification re-runs the user's tests."""
    kernel = Path(spec["kernel"]).resolve()
    entry = LockEntry(
        target=handle.id, reference_hash="", kernel=str(kernel), kernel_hash="", lang=spec["lang"],
        device=spec.get("device", "cpu"), arch="", speedup=0.0, speedup_ci=[0.0, 0.0], date="", tool_version="",
        extra={"outputs": spec.get("outputs", {}),
               **{k: spec[k] for k in ("returns", "pack", "module_state", "eval_only") if spec.get(k)}},
    )
    # the project's build cache (the search already built this exact source there)
    root = Path.cwd()
    impl = CompatDispatcher(handle, entry, root) if entry.lang == "py" else NativeDispatcher(handle, entry, root)
    impl._load_now()  # so the tests' first timed call is not the build
    handle._impl = impl
    handle.active = "kernel"
    handle.reason = f"candidate under verification: {kernel.name}"


def arg_class(v: object) -> tuple:
    """What verification fixed about an argument: dtype, rank and contiguity (not sizes), and a
    non-contiguous tensor's strides: a kernel verified on one such layout (a transpose, told
    its strides by the prompt) may read only that one, and ``x[:, ::2]`` of the same shape and
    rank is another. A lock that recorded no strides then serves non-contiguous calls by the
    reference until the kernel is accepted again.

    Public: the search records each workload's layout with it, the dispatcher checks calls against it.
    """
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    if isinstance(v, torch.Tensor):
        dtype = str(v.dtype).replace("torch.", "")
        return (dtype, v.dim(), True) if v.is_contiguous() else (dtype, v.dim(), False, tuple(v.stride()))
    return (type(v).__name__,)


def _hashable(value: object) -> object:
    """A lock's nested lists (a layout's strides) as tuples, to compare with ``arg_class``."""
    return tuple(_hashable(x) for x in value) if isinstance(value, list) else value


#: call plans kept per dispatcher (one per distinct argument signature); later ones take the checked path
MAX_PLANS = 256
#: a lock's ``pack`` as the call hands the kernel's outputs back ("other" never reaches a kernel)
_PACK_TYPES: dict[str, type | None] = {"bare": None, "tuple": tuple, "list": list}

#: the alignment of every tensor a kernel is verified with (the oracle's 64-byte slots, torch's allocator)
VERIFIED_ALIGNMENT = 64

#: per device type, the dispatch keys of a plain dense tensor (its backend, autograd's and autocast's)
_PLAIN_KEYS: dict[str, int] = {}


def active_mode() -> str:
    """The name of the torch function or dispatch mode in force ('' when none, or only a
    ``with torch.device(...)`` default, which changes nothing a kernel's call does)."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    if torch._C._len_torch_dispatch_stack():
        # only under a mode; torch's modules, like torch, load when a target runs: keeps start-up fast
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        return type(_get_current_dispatch_mode_stack()[-1]).__name__
    if torch._C._is_torch_function_mode_enabled():
        # only under a mode; torch's modules, like torch, load when a target runs: keeps start-up fast
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._device import DeviceContext

        modes = [m for m in _get_current_function_mode_stack() if not isinstance(m, DeviceContext)]
        return type(modes[-1]).__name__ if modes else ""
    return ""


def unplain(t: torch.Tensor) -> str:
    """Why a kernel must not read ``t``'s memory in place of the reference ('' when it may).

    The kernel sees raw memory; the reference sees what torch makes of it. They differ for a
    tensor subclass (its ``__torch_function__`` decides what the reference does and returns), a
    lazy conjugate or negative view, a zero tensor, a sparse or mkldnn layout, a functorch
    wrapper (vmap, grad, jvp) or a FakeTensor (each adds a dispatch key), a forward-mode dual
    tensor (the reference carries its tangent), and memory aligned otherwise than in verification
    (``x[1:]``: a kernel may use aligned loads). The compiled path's ``signature`` refuses the same.
    """
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        return f"a {type(t).__name__} (a tensor subclass)"
    plain = _PLAIN_KEYS.get(t.device.type)
    if plain is None:
        with torch.inference_mode(False):  # a normal tensor's keys, even when first asked in inference mode
            plain = _PLAIN_KEYS[t.device.type] = torch._C._dispatch_keys(torch.empty(0, device=t.device)).raw_repr()
    if torch._C._dispatch_keys(t).raw_repr() & ~plain:
        return f"not a plain dense tensor ({torch._C._dispatch_keys(t)}, layout {t.layout})"
    # with the first such check, as torch itself: keeps start-up fast
    from torch.autograd import forward_ad

    if forward_ad._current_level >= 0 and forward_ad.unpack_dual(t).tangent is not None:
        return "a forward-mode dual tensor"
    if t.numel() and t.data_ptr() % VERIFIED_ALIGNMENT:
        return f"not {VERIFIED_ALIGNMENT}-byte aligned (a view at an offset)"
    return ""


class NativeDispatcher:
    """An accepted native kernel. The first call of each argument signature goes through every
    check (device, autograd, verified layouts, output shapes); later calls with the same
    signature go straight to the compiled call path, about 1-2 µs in all (a module's own
    parameters and buffers are part of its signature)."""

    def __init__(self, handle: TargetHandle, entry: LockEntry, root: Path) -> None:
        self.handle = handle
        self.entry = entry
        self.root = root
        self.device = entry.device
        self.kernel: Any = None
        self.lock = threading.Lock()
        self.calls = 0
        _TRACED.append(self)
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        # how the reference packs its outputs (``model.report.PACKS``); an older lock does not say
        lock_pack = entry.extra.get("pack")
        # output shapes recorded at verification; other signatures learn theirs on first call.
        # Outputs only the reference can hand back ("other": a scalar, a named tuple) are never
        # learned, so such calls stay with the reference.
        self.out_meta: dict[str, list[OutMeta]] = {} if lock_pack == "other" else {
            key: [(tuple(shape), getattr(torch, dtype)) for shape, dtype in outs]
            for key, outs in entry.extra.get("outputs", {}).items()
        }
        #: how the reference packs its outputs, per input signature: ``tuple``, ``list`` or None
        #: (one bare tensor), from the lock for the signatures it records, else learned from the
        #: reference; where an older lock does not say, one output is taken as bare, more as a tuple
        self.packs: dict[str, type | None] = (
            dict.fromkeys(self.out_meta, _PACK_TYPES[lock_pack]) if lock_pack in _PACK_TYPES else {})
        sigs = entry.extra.get("signatures")
        self.signatures = {tuple(_hashable(list(a)) for a in s) for s in sigs} if sigs else None
        #: the compiled call path once loaded (None: every call takes the checked path below)
        self.fast: Any = None
        #: call plans by the helper's argument signature: calls that every check below already
        #: let through once, with the same dtypes, devices, contiguity, sizes and scalar values;
        #: each holds the output metadata and the pack
        self.plans: dict[bytes, tuple[list[OutMeta], type | None]] = {}
        self.is_module = handle.kind == "module"
        #: a module whose layers read ``training``, verified in eval mode: no kernel in training mode
        self.eval_only = self.is_module and bool(entry.extra.get("eval_only"))
        #: a module target's parameters then buffers, per instance (see :meth:`_members`)
        self._extras: dict[int, tuple[weakref.ref[torch.nn.Module], tuple[tuple[dict, tuple], ...], list[torch.Tensor] | None]] = {}

    def _fallback(self, key: str, message: str) -> None:
        self.handle.warn_once(key, f"{message}; using the reference")

    def _load_now(self) -> None:
        try:
            self._load()
        except Exception as e:  # noqa: BLE001 - the first call reports it and falls back
            self.handle.warn_once("load", f"the kernel under verification does not load ({e})")

    def _load(self) -> NativeKernel:
        with self.lock:
            if self.kernel is None:
                # the ABI and the build load ctypes and the compiler's tools: keeps start-up fast
                from ..native import build, callpath
                from ..native.abi import NativeKernel

                # the compiled call path (built once per torch version); else ctypes, said once
                try:
                    helper = callpath.load()
                except Warning:  # warnings turned into errors: the ctypes path still serves
                    helper = None
                result = self._verified_build()
                sealed = build.sealed_library(result)
                try:
                    self.kernel = NativeKernel(sealed)
                except OSError:
                    if sealed == str(result.library):
                        raise
                    # a memory file the loader may not map executable (vm.memfd_noexec): the checked file
                    self.kernel = NativeKernel(str(build.verified_library(result)))
                # plans only where nothing else varies per call: CPU targets that return new tensors
                if self.device == "cpu" and not self.handle.options.inplace:
                    self.fast = helper
        return self.kernel

    def _verified_build(self) -> BuildResult:
        """Build (or reuse) the kernel's library and check its hash; never a library that changed.

        A cached library that no longer hashes to its build record is rebuilt by the build
        itself. Where the lock names the verified library, a cached one that hashes otherwise
        (its record rewritten to match) is never loaded either: it is built again from the
        verified source, and that fresh build is what runs.
        """
        # the build and the sandbox, when a kernel is first built: keeps start-up fast
        from ..native import build
        from ..sandbox.isolation import resolve

        src = build.Source(self.root / self.entry.kernel, self.entry.lang)
        cache = self.root / ".maxcode" / "build"
        # the compiler reads the kernel's source: it runs sandboxed like the oracle's
        result = build.build_all([src], cache, isolation=resolve("auto"))[0]
        expected = self.entry.library_expected(build.build_id(result)) if result.ok else ""
        if expected and result.sha256 != expected and result.cached:
            result = build.build_all([src], cache, isolation=resolve("auto"), force=True)[0]
            if result.ok and result.sha256 != expected:
                self.handle.warn_once("integrity", f"{self.entry.kernel}: rebuilt, and the build differs from the library "
                                      f"verified when it was accepted (sha256 {result.sha256[:16]}, {LOCK_NAME} says "
                                      f"{expected[:16]}): the compiler's output is not reproducible here, so each process "
                                      "builds it again; re-accept the kernel to record this build")
        if not result.ok:
            first = (result.errors or ["the build failed"])[0].splitlines()[0]
            raise RuntimeError(f"the kernel does not build: {first}"[:300])
        if result.integrity:
            self.handle.warn_once("integrity", f"{self.entry.kernel}: {result.integrity}")
        build.verified_library(result)
        return result

    def __call__(self, ref: Callable[..., object], args: tuple, kwargs: dict) -> object:
        fast = self.fast
        if fast is not None and not kwargs:
            if self.is_module:
                call_args, extras = args[1:], self._members(args[0])
                if extras is None or self.eval_only and args[0].training:  # the checked path says why
                    return self._checked(ref, args, kwargs)
                sig = fast.signature((*call_args, *extras))
            else:
                call_args, extras = args, ()
                sig = fast.signature(args)
            plan = self.plans.get(sig) if sig is not None else None
            if plan is not None:
                try:
                    outs = fast.run(self.kernel.address, call_args, extras, plan[0], None, None)
                except Exception:  # noqa: BLE001 - the checked path reports it and falls back
                    return self._checked(ref, args, kwargs)
                if outs.__class__ is not int:
                    self.calls += 1
                    pack = plan[1]
                    return outs[0] if pack is None else outs if pack is list else tuple(outs)
                self._fallback("rc", f"the kernel returned {outs}")
                return ref(*args)
        return self._checked(ref, args, kwargs)

    def _checked(self, ref: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        """Every check, then the call; a call that passed them all leaves a plan for its signature."""
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        if kwargs:
            return ref(*args, **kwargs)
        h = self.handle
        if h.kind == "module":
            # with the first module call, not with the package: keeps start-up fast
            from .introspect import abi_extras

            module, call_args = args[0], args[1:]
            if self.eval_only and module.training:
                self._fallback("training", "this instance is in training mode, and its layers read `training` (the kernel "
                               "was verified in eval mode: call .eval() for inference)")
                return ref(*args)
            named = abi_extras(module)
            other = self._other_module(named)
            if other:
                self._fallback(f"module_state:{other}", other)
                return ref(*args)
            # not detached before the checks: parameters that require grad while grad mode is on
            # need the reference's graph (detached first, a training step got no gradients)
            extras = [t for _, t, _ in named]
        else:
            call_args, extras = args, []
        tensors = [v for v in (*call_args, *extras) if isinstance(v, torch.Tensor)]
        if self._refused(call_args, tensors):
            return ref(*args)
        if h.kind == "module":
            extras = [t.detach() for t in extras]
        if h.options.inplace:
            # the kernel writes into the arguments; return what the reference returns
            if self._run(call_args, extras, tensors, []) is None:
                return ref(*args)
            returns = self.entry.extra.get("returns", "none")
            return call_args[int(returns[3:])] if returns.startswith("arg") else None
        key = arg_key(call_args)
        meta = self.out_meta.get(key)
        if meta is None:
            # output shapes come from the reference, once per input signature
            result = ref(*args)
            pack = result.__class__ if result.__class__ in (tuple, list) else None
            outs = result if pack else (result,)
            # a namedtuple or torch.return_types result is not rebuilt from a list: the reference keeps it
            if all(isinstance(o, torch.Tensor) for o in outs) and (pack or isinstance(result, torch.Tensor)):
                self.out_meta[key] = [(o.shape, o.dtype) for o in outs]
                self.packs[key] = pack
            return result
        outs = self._run(call_args, extras, tensors, meta)
        if outs is None:
            return ref(*args)
        pack = self.packs.get(key, None if len(meta) == 1 else tuple)
        if self.fast is not None and len(self.plans) < MAX_PLANS:
            sig = self._plan_signature(args, call_args)
            if sig is not None:
                self.plans[sig] = (meta, pack)
        return outs[0] if pack is None else outs if pack is list else tuple(outs)

    def _plan_signature(self, args: tuple, call_args: tuple) -> bytes | None:
        """The compiled path's signature of a call that passed every check (a module's with its
        parameters and buffers after the arguments), or None where no plan may be kept."""
        if not self.is_module:
            return self.fast.signature(args)
        members = self._members(args[0])
        return None if members is None else self.fast.signature((*call_args, *members))

    def _members(self, module: torch.nn.Module) -> list[torch.Tensor] | None:
        """``module``'s parameters then buffers (the ABI's extras), kept per instance: walking
        ``named_parameters()`` costs more than a small kernel's whole call. Kept only while every
        submodule's parameter, buffer and child dictionaries hold the very objects they held when
        the list was made, so a reassigned weight or a new submodule is seen on the next call; a
        change of dtype or shape in place shows in the call's signature. None for an instance
        whose names, shapes or dtypes differ from the verified one's (:meth:`_other_module`)."""
        key = id(module)
        entry = self._extras.get(key)
        if entry is not None and entry[0]() is module:
            fast = self.fast
            if fast.same_values(entry[1]) if fast is not None else all(
                    len(d) == len(held) and all(map(operator.is_, d.values(), held)) for d, held in entry[1]):
                return entry[2]
        # with the first module call, not with the package: keeps start-up fast
        from .introspect import abi_extras

        if len(self._extras) >= MAX_PLANS:
            self._extras.clear()
        dicts = tuple((d, tuple(d.values())) for m in module.modules() for d in (m._parameters, m._buffers, m._modules))
        named = abi_extras(module)
        extras = None if self._other_module(named) else [t for _, t, _ in named]
        self._extras[key] = (weakref.ref(module, lambda _, key=key: self._extras.pop(key, None)), dicts, extras)
        return extras

    def _other_module(self, named: list[tuple[str, torch.Tensor, str]]) -> str | None:
        """Why a module instance's parameters and buffers (``introspect.abi_extras``) may not reach
        the kernel: they differ from the configuration the lock says it was verified on, or the
        lock does not say (an entry written before it recorded one: a native kernel reads raw
        memory, and one written for 128x128 weights reads a 256x64 layer past its end). None: they
        may."""
        verified = self.entry.extra.get("module_state")
        if not verified:
            return ("the lock entry records no module configuration (written by an older version): run "
                    "pytest --maxcode to verify the kernel again")
        if len(named) != len(verified):
            return (f"this instance's number of parameters and buffers ({len(named)}, verified {len(verified)}) "
                    "differs from the verified instance's")
        for (name, t, _role), (v_name, v_shape, v_dtype) in zip(named, verified):
            dtype = str(t.dtype).replace("torch.", "")
            if name != v_name or list(t.shape) != list(v_shape) or dtype != v_dtype:
                return (f"this instance's {name} ({list(t.shape)} {dtype}; verified {v_name} {list(v_shape)} {v_dtype}) "
                        "differs from the verified instance's")
        return None

    def _refused(self, call_args: tuple, tensors: list) -> bool:
        """Whether this call must run the reference (after one warning, unless the cause is the
        normal case): inputs on another device, autograd, autocast, a torch mode, an input the
        kernel must not read in place, or arguments outside the verified layouts."""
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        if any(t.device.type != self.device for t in tensors):
            self._fallback("device", f"inputs are not on {self.device}")
            return True
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return True  # autograd needs the reference's graph; quietly the normal case in training
        if torch.is_autocast_enabled(self.device):
            self._fallback("autocast", f"autocast is on for {self.device} (the kernel was verified without it)")
            return True
        mode = active_mode()
        if mode:
            self._fallback(f"mode:{mode}", f"{mode} is active (it sees the reference's operations; a kernel has none)")
            return True
        for i, t in enumerate(tensors):
            why = unplain(t)
            if why:
                # vmap, grad, jvp, tracing, views: the kernel stays for later plain calls
                self._fallback(f"unplain:{why.split(' (')[0]}", f"input {i} is {why}")
                return True
        classes = tuple(arg_class(v) for v in call_args)
        if self.signatures is not None and classes not in self.signatures:
            self._fallback(f"sig{classes}", f"arguments {classes} differ from the verified layouts")
            return True
        return False

    def _run(self, call_args: tuple, extras: list, tensors: list, meta: list) -> list | None:
        """Run the kernel; ``None`` (after one warning) means: use the reference."""
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        from ..native.abi import (  # loaded with the first kernel, not with the package: keeps start-up fast
            KernelError,
            call_native,
        )

        try:
            kernel = self.kernel or self._load()
            device = tensors[0].device if tensors else torch.device(self.device)
            stream = torch.cuda.current_stream(device).cuda_stream if self.device == "cuda" else None
            outs = call_native(kernel, call_args, extras, meta, device, stream)
        except KernelError as e:
            self._fallback("rc", f"the kernel returned {e.rc}")
            return None
        except Exception as e:  # noqa: BLE001 - any failure falls back
            self.handle.use_reference(f"kernel failed: {e}")
            self._fallback("load", f"the accepted kernel failed ({e})")
            return None
        self.calls += 1
        return outs


class CompatDispatcher:
    """An accepted compat kernel (a ``.py`` file defining ``ModelNew`` or the function)."""

    def __init__(self, handle: TargetHandle, entry: LockEntry, root: Path) -> None:
        self.handle = handle
        self.path = root / entry.kernel
        self.impl: Any = None
        self.calls = 0
        _TRACED.append(self)
        self.instances: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: per thread: whether this thread is inside the kernel (see __call__)
        self._inside = threading.local()

    def _load_now(self) -> None:
        try:
            self.impl = self._load()
        except Exception as e:  # noqa: BLE001
            self.handle.warn_once("load", f"the kernel under verification does not load ({e})")

    def _load(self) -> Callable[..., object]:
        spec = importlib.util.spec_from_file_location(f"maxcode_kernel_{self.handle.id.replace('.', '_')}", self.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        name = "ModelNew" if self.handle.kind == "module" else self.handle.reference.__name__
        impl = getattr(module, name, None) or getattr(module, "ModelNew", None)
        if impl is None:
            raise RuntimeError(f"{self.path.name} defines no {name}")
        return impl

    def __call__(self, ref: Callable[..., object], args: tuple, kwargs: dict) -> object:
        if getattr(self._inside, "active", False):
            # the kernel calls the target itself (a compiled copy of the reference's forward, a
            # subclass's super().forward()): that inner call is the reference's, not the kernel again
            return ref(*args, **kwargs)
        self._inside.active = True
        try:
            if self.impl is None:
                self.impl = self._load()
            if self.handle.kind == "module":
                out = self._instance(args[0])(*args[1:], **kwargs)
            else:
                impl = self.impl() if isinstance(self.impl, type) else self.impl
                out = impl(*args, **kwargs)
            self.calls += 1
            return out
        except Exception as e:  # noqa: BLE001
            self.handle.use_reference(f"kernel failed: {e}")
            self.handle.warn_once("compat", f"the accepted kernel failed ({e}); using the reference")
            return ref(*args, **kwargs)
        finally:
            self._inside.active = False

    def _instance(self, module: torch.nn.Module) -> Callable[..., object]:
        """The kernel's module for this live one: built around it where ``ModelNew`` says how
        (``maxcode_from``: its weights and constructor's arguments, shared), else built with no
        arguments and given a copy of its weights."""
        inst = self.instances.get(module)
        if inst is None:
            if isinstance(self.impl, type) and hasattr(self.impl, "maxcode_from"):
                inst = self.impl.maxcode_from(module)
            else:
                inst = self.impl() if isinstance(self.impl, type) else self.impl
                if hasattr(inst, "load_state_dict"):
                    inst.load_state_dict(module.state_dict(), strict=False)
            self.instances[module] = inst
        return inst


def dispatch_overhead_us(handle: TargetHandle, args: tuple, entry_extra: dict[str, Any], *, calls: int = 2000) -> float | None:
    """What one call of ``handle``'s target costs user code besides its kernel: a kernel that
    does nothing, accepted with ``entry_extra`` (the lock entry's outputs, pack and module
    configuration), called with ``args`` (a module target's instance first) on the planned
    path a verified kernel's calls take, wrapper to outputs; the median of five runs, in µs.
    The oracle times the compiled call itself (allocation, descriptors, call) on both sides of
    the boundary; this adds the dispatcher's own work: the signature, the plan, and for a module
    its parameters and buffers. None where no plan serves such calls (CPU, new outputs only)."""
    # the compiled path and torch, when a kernel was found: keeps start-up fast
    import torch

    from ..native import callpath
    from ..native.abi import NativeKernel

    helper = callpath.load()
    if helper is None or handle.options.inplace:
        return None
    entry = LockEntry(target=handle.id, reference_hash="", kernel="", kernel_hash="", lang="cpp", device="cpu", arch="",
                      speedup=1.0, speedup_ci=[1.0, 1.0], date="", tool_version="", extra=dict(entry_extra))
    d = NativeDispatcher(handle, entry, Path.cwd())
    _TRACED.remove(d)  # a measurement, not the project's calls
    d.kernel, d.fast = NativeKernel.at_address(helper.noop_address()), helper
    ref = handle.reference
    now = time.perf_counter_ns
    with torch.no_grad():
        for _ in range(2):  # the first call learns or checks the output layout, the second leaves a plan
            d(ref, args, {})
        if not d.plans:
            return None
        runs = []
        for _ in range(5):
            t0 = now()
            for _ in range(calls):
                d(ref, args, {})
            runs.append((now() - t0) / calls / 1e3)
    return round(sorted(runs)[2], 3)
