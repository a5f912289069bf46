"""What a candidate receives, read from the reference itself: every input's name, role and
layout in the order the native ABI passes them, and the plain values the reference reads.

The order is the one the oracle's worker and the dispatcher build: the positional arguments,
then ``module.named_parameters()``, then ``module.named_buffers()`` (a module's own parameters
before its submodules'). :func:`abi_extras` makes those same two calls, so the prompt cannot
drift from what a kernel is handed. :func:`describe_in_subprocess` serves references the
search process must not import (KernelBench problems run only in child processes); the other
functions read live objects.
"""

from __future__ import annotations

import dis
import importlib
import importlib.util
import inspect
import json
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..model.jsontypes import JSON

if TYPE_CHECKING:
    import torch

PLAIN = (bool, int, float, str, type(None))
MAX_REPR = 200
MARK = "MAXCODE-INTROSPECT"


def abi_extras(module: torch.nn.Module) -> list[tuple[str, torch.Tensor, str]]:
    """(name, tensor, role) of what follows the arguments: the same calls the worker makes."""
    out = [(n, p, "parameter") for n, p in module.named_parameters()]
    return out + [(n, b, "buffer") for n, b in module.named_buffers()]


def module_state(module: torch.nn.Module) -> list[list[JSON]]:
    """``[name, shape, dtype]`` of each of :func:`abi_extras`: the configuration a module kernel
    was verified on (the lock records it) and the one an instance must have for the kernel to
    serve it (a kernel written for 128x128 weights would read a 256x64 layer's wrongly, or past
    its end); also what the capture keeps one of per target."""
    return [[n, list(t.shape), str(t.dtype).replace("torch.", "")] for n, t, _role in abi_extras(module)]


def reads_training(module: torch.nn.Module) -> bool:
    """Whether any of the module's layers has code that reads ``training`` (dropout, batch norm,
    a forward with ``if self.training``): the oracle verifies modules in eval mode, so a kernel
    for such a module must not serve an instance in training mode, whose reference computes
    something else. Read from the code, not by calling it: a layer that reads the flag but
    gives the same outputs in both modes on the captured inputs would still differ on others."""
    seen: set[type] = set()
    for sub in module.modules():
        cls = type(sub)
        if cls in seen:
            continue
        seen.add(cls)
        for klass in cls.__mro__:
            if klass.__name__ == "Module" and klass.__module__ == "torch.nn.modules.module" or klass is object:
                break  # nn.Module's own train()/eval() read the flag to set it
            for value in vars(klass).values():
                fn = getattr(value, "__func__", value)
                if isinstance(fn, types.FunctionType) and "training" in _names_read(fn.__code__):
                    return True
    return False


def _plain(value: object, depth: int = 0) -> bool:
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, (tuple, list)) and depth < 2 and len(value) <= 16:
        return all(_plain(v, depth + 1) for v in value)
    return type(value).__module__ == "torch" and type(value).__name__ in ("dtype", "device")


def spell(value: object) -> str:
    """A value as Python source would write it (``1.5``, ``(5,)``, ``torch.float32``)."""
    text = repr(value)
    if type(value).__module__ == "torch" and type(value).__name__ == "device":
        text = f"torch.device({str(value)!r})"
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + " ..."


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and the code of the functions (lambdas, comprehensions) nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _names_read(code: types.CodeType) -> set[str]:
    """Every global and attribute name a code object (and the functions nested in it) reads."""
    return {name for c in _codes(code) for name in c.co_names}


def _globals_read(code: types.CodeType) -> set[str]:
    """The global names a code object (and the functions nested in it) loads: unlike
    ``co_names``, not the attribute names (``x.relu()`` does not read a global ``relu``)."""
    return {ins.argval for c in _codes(code) for ins in dis.get_instructions(c) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}


def _own_functions(cls: type) -> list[types.FunctionType]:
    """forward and the class's other own methods (forward may call them), not torch's, and
    not ``__init__``: what the constructor sets but the call never reads is not stated."""
    out = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch") or klass is object:
            break
        for value in vars(klass).values():
            fn = getattr(value, "__func__", value)
            if isinstance(fn, types.FunctionType) and fn.__name__ != "__init__":
                out.append(fn)
    return out


def _same_module_function(value: Any, glb: dict[str, Any]) -> types.FunctionType | None:
    """The plain function behind a global (unwrapped, or a marked target's reference) when it
    is defined in the module whose globals are ``glb``: a helper the reference calls, whose
    constants the kernel must reproduce too. None for anything else (torch, other modules)."""
    value = getattr(getattr(value, "maxcode", None), "reference", None) or value
    try:
        value = inspect.unwrap(value)
    except ValueError:  # a cycle of __wrapped__
        return None
    if isinstance(value, types.FunctionType) and value.__globals__ is glb:
        return value
    return None


def _global_value(value: Any) -> str | None:
    """A module-level constant as the prompt states it; None for what is not a constant (a
    function, a class, a module). A tensor is not an input the kernel receives: its values are
    stated when few, else its dtype and shape with a word that the values are not shown."""
    if _plain(value):
        return spell(value)
    torch = sys.modules.get("torch")  # a tensor exists only where torch is imported; never import it here
    if torch is not None and isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        if value.numel() <= 16:
            return f"torch.tensor({value.tolist()!r}, dtype={value.dtype})"
        return f"...  # module-level; a {dtype} tensor of shape {list(value.shape)}; its {value.numel()} values are not shown"
    return None


def global_values(fn: Any) -> list[tuple[str, str]]:
    """(name, spelled value) of the module-level constants (plain values and tensors) a
    function's code reads, and those read by the functions of the same module it calls, followed
    transitively: a constant inside a helper changes the result as much as one in the reference."""
    if getattr(fn, "__code__", None) is None:
        return []
    glb = getattr(fn, "__globals__", {})
    found: dict[str, str] = {}
    visited: set[types.CodeType] = set()
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        if code in visited:
            continue
        visited.add(code)
        for name in sorted(_globals_read(code)):
            if name not in glb:
                continue
            helper = _same_module_function(glb[name], glb)
            if helper is not None:
                todo.append(helper.__code__)
            elif (text := _global_value(glb[name])) is not None:
                found[name] = text
    return sorted(found.items())


def _is_torch(module: object) -> bool:
    return type(module).__module__.startswith("torch.")


def attribute_values(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(``self.path.attr``, spelled value) of the plain attributes the module's own code reads,
    and the configuration of the torch layers it holds (their repr: ``Linear(in_features=...)``)."""
    out: list[tuple[str, str]] = []
    for prefix, sub in module.named_modules():
        name = "self" + (f".{prefix}" if prefix else "")
        if _is_torch(sub):
            if prefix and not list(sub.children()):
                out.append((name, repr(sub)))
            continue
        read: set[str] = set()
        for fn in _own_functions(type(sub)):
            read |= _names_read(fn.__code__)
        for attr, value in vars(sub).items():
            if attr not in read or attr.startswith("_") or attr == "training":
                continue
            if _plain(value):
                out.append((f"{name}.{attr}", spell(value)))
            elif type(value).__name__ == "Tensor":
                out.append((f"{name}.{attr}", _loose_tensor(value)))
    return out


def _loose_tensor(t: torch.Tensor) -> str:
    """A tensor attribute that is neither parameter nor buffer: the kernel is not handed it,
    so its values are stated when few, its layout otherwise."""
    if t.numel() <= 16:
        return f"torch.tensor({t.tolist()!r}, dtype={t.dtype})  # not passed to the kernel"
    return f"...  # a {str(t.dtype).replace('torch.', '')} tensor of shape {list(t.shape)}, not passed to the kernel"


def module_globals(module: torch.nn.Module) -> list[tuple[str, str]]:
    """Module-level plain constants that the reference's own methods read."""
    seen: dict[str, str] = {}
    for sub in module.modules():
        if not _is_torch(sub):
            for fn in _own_functions(type(sub)):
                seen.update(global_values(fn))
    return sorted(seen.items())


def tensor_layout(value: object) -> dict[str, JSON]:
    """dtype, shape and strides (in elements) as the candidate's DLTensor states them; a
    Python scalar as the 0-d tensor it arrives as, with its value."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape), "strides": list(value.stride())}
    dtype = {bool: "bool", int: "int64", float: "float64"}.get(type(value), type(value).__name__)
    return {"dtype": dtype, "shape": [], "strides": [], "value": spell(value)}


def argument_names(fn: Callable[..., object], n: int, skip_self: bool) -> list[str]:
    """The reference's own names for its first ``n`` positional parameters (``*args`` numbered)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if skip_self and params and params[0].name == "self":
        params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    return [positional[i].name if i < len(positional) else f"{star}[{i - len(positional)}]" for i in range(n)]


def describe(reference: Callable[..., object], workloads: Mapping[str, Sequence[object]], *,
             module: torch.nn.Module | None = None, init_args: Sequence[object] | None = None) -> dict[str, Any]:
    """Everything a prompt states about the inputs (JSON-able): ``reference`` is the function
    or the module's forward, ``workloads`` maps each workload's name to its first input set."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    n_args = max((len(v) for v in workloads.values()), default=0)
    inputs: list[dict[str, object]] = []
    for i, name in enumerate(argument_names(reference, n_args, skip_self=module is not None)):
        sets = {w: vals[i] for w, vals in workloads.items() if i < len(vals)}
        role = "argument" if any(isinstance(v, torch.Tensor) for v in sets.values()) else "scalar"
        inputs.append({"name": name, "role": role, "workloads": {w: tensor_layout(v) for w, v in sets.items()}})
    desc: dict[str, Any] = {"inputs": inputs}
    if module is None:
        desc["globals"] = global_values(reference)
        return desc
    for name, t, role in abi_extras(module):
        inputs.append({"name": name, "role": role, "layout": tensor_layout(t)})
    desc["attributes"] = attribute_values(module)
    desc["globals"] = module_globals(module)
    if init_args:  # a constructor without arguments says nothing
        desc["constructor"] = constructor_call(type(module), init_args)
    return desc


def constructor_call(cls: type, init_args: Sequence[object]) -> str:
    """``Model(in_features=10, scaling_factor=1.5)``: the call that built the reference."""
    names = argument_names(cls.__init__, len(init_args), skip_self=True)
    args = ", ".join(spell(v) if n.endswith("]") else f"{n}={spell(v)}" for n, v in zip(names, init_args))
    return f"{cls.__name__}({args})"


def _reference_object(spec: dict[str, Any]) -> tuple[types.ModuleType, Any]:
    """(the Python module, the named function or class) a spec points at."""
    if spec.get("rootdir") and spec["rootdir"] not in sys.path:
        sys.path.insert(0, spec["rootdir"])
    if spec.get("module"):
        mod = importlib.import_module(spec["module"])
    else:
        found = importlib.util.spec_from_file_location("maxcode_reference", spec["path"])
        if found is None or found.loader is None:
            raise ImportError(f"cannot import {spec['path']}")
        mod = importlib.util.module_from_spec(found)
        found.loader.exec_module(mod)
    obj: Any = mod
    for part in spec["qualname"].split("."):
        obj = getattr(obj, part)
    return mod, obj


def describe_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`describe` for a reference named by file (or module name) and qualname, with its
    captured input files and, for a module, its captured instance or ``get_init_inputs()``."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    mod, obj = _reference_object(spec)
    workloads = {name: list(torch.load(path, weights_only=True)["sets"][0]) for name, path in spec["captured"]}
    if spec["kind"] != "module":
        return describe(getattr(getattr(obj, "maxcode", None), "reference", obj), workloads)
    init_args = None
    if spec.get("instance"):
        instance = torch.load(spec["instance"], weights_only=False)
    else:
        init_args = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
        torch.manual_seed(spec.get("seed", 0))
        instance = obj(*init_args)
    forward = getattr(getattr(type(instance), "maxcode", None), "reference", None) or type(instance).forward
    return describe(forward, workloads, module=instance, init_args=init_args)


SCRIPT = f"""
import json, sys
from pytest_maxcode.targets.introspect import describe_spec
print({MARK!r} + json.dumps(describe_spec(json.loads(sys.argv[1]))))
"""


def describe_in_subprocess(spec: dict[str, Any], timeout: float = 120.0) -> dict[str, JSON]:
    """:func:`describe_spec` in a child process: the reference's code never runs in this one."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], check=False, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, cwd=spec.get("rootdir") or None)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
    raise RuntimeError(f"introspecting {spec.get('qualname')}: {last[0][:300]}")
