"""``@maxcode.optimize``: mark a function or ``nn.Module`` as a target.

Outside ``pytest --maxcode`` and without an accepted kernel, the wrapper costs one
attribute load and a ``None`` test over the bare call. Everything else (capture, the
lock file's kernel) is installed into the handle's ``_impl`` slot when it applies.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from pathlib import Path
from typing import Any, Callable

from .dispatch import install, install_forced
from .handle import MaxcodeWarning, TargetHandle, TargetOptions, normalized_source, normalized_source_in_file
from .lock import find_lock, read_lock

__all__ = [
    "LANGS",
    "ON_REGISTER",
    "REGISTRY",
    "MaxcodeWarning",
    "TargetHandle",
    "TargetOptions",
    "normalized_source",
    "normalized_source_in_file",
    "optimize",
]

LANGS = ("auto", "cpp", "cuda")

#: every decorated target in this process, by id (the plugin reads this)
REGISTRY: dict[str, "TargetHandle"] = {}


def _source_file(obj: Any) -> str | None:
    try:
        return inspect.getsourcefile(obj)
    except (OSError, TypeError):
        return None  # defined interactively: no lock file can name it


def _target_id(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def optimize(
    obj: Any = None,
    *,
    lang: str = "auto",
    atol: float | None = None,
    rtol: float | None = None,
    inputs: Callable[[], Any] | None = None,
    min_speedup: float | None = None,
    budget: int | None = None,
    inplace: bool = False,
    accept_range_limited: bool | None = None,
) -> Any:
    """Mark a hot function or ``nn.Module`` subclass for optimization.

    Usable bare (``@maxcode.optimize``) or with options (``@maxcode.optimize(lang="cuda")``).
    Many parameters because each keyword is one of the target's options (``TargetOptions``), the
    public surface a user writes.
    ``accept_range_limited=True`` lets a kernel that is correct on the captured inputs but not on
    wider or special values (NaN, inf) be applied and proposed anyway; ``False`` refuses it
    whatever ``[tool.maxcode]`` says; None leaves it to ``[tool.maxcode] accept_range_limited``.
    """
    if lang not in LANGS:
        raise ValueError(f"maxcode.optimize: lang={lang!r}; expected one of {', '.join(LANGS)}")
    if inputs is not None and not callable(inputs):
        raise TypeError("maxcode.optimize: inputs= must be a function returning a list of arguments")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise ValueError("maxcode.optimize: budget= must be a positive number of candidates")
    if accept_range_limited is not None and not isinstance(accept_range_limited, bool):
        raise TypeError("maxcode.optimize: accept_range_limited= must be True or False")
    options = TargetOptions(lang, atol, rtol, inputs, min_speedup, budget, inplace, accept_range_limited)
    if obj is None:
        return lambda o: _decorate(o, options)
    return _decorate(obj, options)


def _decorate(obj: Any, options: TargetOptions) -> Any:
    if isinstance(obj, type):
        return _decorate_module(obj, options)
    if not callable(obj):
        raise TypeError(f"maxcode.optimize: expected a function or an nn.Module subclass, got {type(obj).__name__}")
    if inspect.isgeneratorfunction(obj) or inspect.isasyncgenfunction(obj):
        raise TypeError(f"maxcode.optimize: {obj.__qualname__} is a generator; only functions that return their result can be optimized")
    if inspect.iscoroutinefunction(obj):
        raise TypeError(f"maxcode.optimize: {obj.__qualname__} is async; only plain functions can be optimized")
    if not (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
        raise TypeError(f"maxcode.optimize: {type(obj).__name__} objects are not supported; decorate a function or an nn.Module subclass")
    handle = TargetHandle(_target_id(obj), "function", obj, None, options, _source_file(obj))
    fn = obj

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        impl = handle._impl
        if impl is None:
            return fn(*args, **kwargs)
        return impl(fn, args, kwargs)

    wrapper.maxcode = handle  # type: ignore[attr-defined]
    _register(handle)
    return wrapper


def _decorate_module(cls: type, options: TargetOptions) -> type:
    try:
        import torch  # torch only for a class: keeps start-up fast
    except ImportError:  # pragma: no cover
        raise TypeError("maxcode.optimize: classes must be torch.nn.Module subclasses (torch is not installed)") from None
    if not issubclass(cls, torch.nn.Module):
        raise TypeError(f"maxcode.optimize: class {cls.__qualname__} is not an nn.Module subclass; decorate its method's function instead")
    forward = cls.__dict__.get("forward")
    if forward is None:
        raise TypeError(f"maxcode.optimize: {cls.__qualname__} defines no forward()")
    if inspect.isgeneratorfunction(forward):
        raise TypeError(f"maxcode.optimize: {cls.__qualname__}.forward is a generator")
    handle = TargetHandle(_target_id(cls), "module", forward, cls, options, _source_file(cls))

    @functools.wraps(forward)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        impl = handle._impl
        if impl is None:
            return forward(self, *args, **kwargs)
        return impl(forward, (self, *args), kwargs)

    cls.forward = wrapper  # type: ignore[attr-defined]
    cls.maxcode = handle  # type: ignore[attr-defined]
    _register(handle)
    return cls


#: called with each newly registered handle (pytest --maxcode attaches its recorder)
ON_REGISTER: list[Callable[["TargetHandle"], None]] = []


def _register(handle: TargetHandle) -> None:
    REGISTRY[handle.id] = handle
    for hook in ON_REGISTER:
        hook(handle)
    if handle._impl is not None:
        return
    if os.environ.get("MAXCODE_DISABLE", "") not in ("", "0"):
        handle.reason = "MAXCODE_DISABLE is set"
        return
    forced = os.environ.get("MAXCODE_CANDIDATES")
    if forced:
        spec = json.loads(forced).get(handle.id)
        if spec is not None:
            install_forced(handle, spec)
            return
    if handle.source_file is None:
        return
    lock = find_lock(Path(handle.source_file).resolve().parent)
    if lock is None:
        return
    try:
        entries = read_lock(lock)
    except ValueError as e:
        handle.warn_once("lock", str(e))
        return
    entry = entries.get(handle.id)
    if entry is None:
        return
    install(handle, entry, lock.parent)
