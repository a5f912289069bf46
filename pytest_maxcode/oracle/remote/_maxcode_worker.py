"""Code that runs inside the oracle's worker processes. Imports nothing from the package.

Started as ``python _maxcode_worker.py CONTROL_FD`` (so only this folder is on the path).
The process is a fork server ("zygote"): it imports torch and the reference once, then
forks one fresh child per job. A candidate therefore gets a warm but pristine process:
whatever it patches, leaks or corrupts dies with its child, and the next candidate
starts clean. Each child gets its own message channel and stdout/stderr pipe, passed
in by the parent over the control socket (SCM_RIGHTS).

Messages are plain data, each a named event with keyword data, ``(name, {keywords})``
(pytest-xdist's style); the parent validates every one it receives (its
``oracle/protocol.py``). Zygote <-> parent: JSON ``[name, {keywords}]`` on a SOCK_SEQPACKET
socket, with file descriptors alongside. Child -> parent: ``torch.save`` bytes that the
parent loads with ``weights_only=True`` (tensors, numbers, strings, lists, dicts: a
candidate cannot make the parent run code). Parent -> child: pickle (the child trusts the parent).
"""

from __future__ import annotations

import time

_NOW = time.perf_counter_ns  # bound before any candidate code exists in this process

import copy  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from multiprocessing.connection import Connection  # noqa: E402
from multiprocessing.reduction import recv_handle  # noqa: E402


def _keep_to_server_cores() -> None:
    """Every thread of the zygote (and so every process it forks) stays off the trusted timer's
    core (``MAXCODE_SERVER_CPUS``, set by the trusted side). Called once the zygote is set up,
    not before its imports: the reference's zygote and the candidates' start together, and on a
    2-core machine their two ``import torch`` kept to one core took turns (2.0 s until both were
    ready; 1.4 s side by side)."""
    spec = os.environ.get("MAXCODE_SERVER_CPUS", "")
    if not spec:
        return
    try:
        cpus = {int(c) for c in spec.split(",")}
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), cpus)
    except (OSError, ValueError):
        pass


import torch  # noqa: E402 - the expensive import every child then shares

try:
    # every message and file this process writes is torch.save bytes, and their zip records'
    # CRC32 took most of the writing (2.2 s of 2.2 for 384 MiB, 0.4 without): a large
    # workload's input sets, expected outputs and per-set outputs. The reader is the trusted
    # side, whose checks are on the values; torch.load does not need the CRC
    from torch.utils.serialization import config as _serialization  # noqa: E402

    _serialization.save.compute_crc32 = False
except (ImportError, AttributeError):  # a torch without the switch: the CRC is computed
    pass

try:  # siblings: top-level modules when this file runs as the worker script
    import _maxcode_ranges as ranges
    import _maxcode_shm as shm
except ModuleNotFoundError:  # imported from the package (tests of its pieces)
    from . import _maxcode_ranges as ranges
    from . import _maxcode_shm as shm

_SLEEP = time.sleep
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_MAX_CTL = 1 << 16


# ----------------------------------------------------------------------------- control


def _send_ctl(sock: socket.socket, name: str, **kwargs: object) -> None:
    """One control event to the parent, which validates its name and keywords."""
    sock.send(json.dumps((name, kwargs)).encode())


def _recv_ctl(sock: socket.socket) -> tuple[str, dict, list[int]]:
    """The parent's next command (name, keywords) and the descriptors sent with it; a closed
    socket reads as ``exit``."""
    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_CTL, 4)
    if not data:
        return "exit", {}, fds
    name, kwargs = json.loads(data)
    return name, kwargs, fds


def _send_child(conn: Connection, name: str, **kwargs: object) -> None:
    """One named event with keyword data (pytest-xdist's style); the parent validates both."""
    buf = io.BytesIO()
    torch.save((name, kwargs), buf)
    conn.send_bytes(buf.getvalue())


# ----------------------------------------------------------------------------- processes


def _ppid_map() -> dict[int, int]:
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: parse after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields and fields[0] != b"Z":
            out[int(name)] = int(fields[1])
    return out


def _descendants(roots: set[int]) -> set[int]:
    ppids = _ppid_map()
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        nxt = {pid for pid, ppid in ppids.items() if ppid in frontier and pid not in found}
        found |= nxt
        frontier = nxt
    return found


def _kill_leftovers(child_pid: int) -> int:
    """Kill whatever the child left behind; as subreaper we inherit its orphans."""
    me = os.getpid()
    killed = 0
    try:
        os.killpg(child_pid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(50):
        left = _descendants({me})
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        _SLEEP(0.01)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
    return killed


def _shared_places(folders: list[str]) -> list[tuple[str, frozenset[str]]]:
    """``folders`` with what each holds now (at start-up): what :func:`_clear` keeps."""
    out = []
    for folder in folders:
        try:
            out.append((folder, frozenset(os.listdir(folder))))
        except OSError:
            continue
    return out


def _clear(places: list[tuple[str, frozenset[str]]]) -> None:
    """Empty what the jobs of this worker share (the job folder, the sandbox's private /tmp and
    /dev/shm, its System V IPC objects), keeping what was there at start-up: nothing one
    candidate leaves is seen by another (a stash of answers for the range sets, say)."""
    for folder, keep in places:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name in keep:
                continue
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
    if places:  # the sandbox has an IPC namespace of its own: every object in it is a job's
        libc = ctypes.CDLL(None, use_errno=True)
        for kind, remove in (("shm", lambda i: libc.shmctl(i, 0, None)), ("sem", lambda i: libc.semctl(i, 0, 0)),
                             ("msg", lambda i: libc.msgctl(i, 0, None))):
            try:
                with open(f"/proc/sysvipc/{kind}") as f:
                    ids = [int(line.split()[1]) for line in f.readlines()[1:] if line.split()]
            except (OSError, ValueError, IndexError):
                continue
            for ident in ids:
                remove(ident)  # IPC_RMID (0)


def _set_limits(job: dict) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = job["cpu_seconds"]
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 5))
    fsize = job["max_file_bytes"]
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(fsize), int(fsize)))
    mem = job["max_memory"]
    if mem:
        # RLIMIT_DATA counts private writable memory (heap, anonymous mmap): the limit is
        # what the child already uses (torch, inputs) plus the budget for the candidate.
        used = 0
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    used = int(line.split()[1]) * 1024
        lim = used + int(mem)
        resource.setrlimit(resource.RLIMIT_DATA, (lim, lim))


# ----------------------------------------------------------------------------- reference


def _import_path(path: str, name: str):
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Reference:
    """The trusted reference: a KernelBench ``Model`` or a plain function plus its inputs."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        if spec.get("module"):
            # a marked target: imported under its own name, so its package's imports work
            root = spec.get("rootdir")
            if root and root not in sys.path:
                sys.path.insert(0, root)
            module = importlib.import_module(spec["module"])
            obj = module
            for part in spec["name"].split("."):
                obj = getattr(obj, part)
            self.init_inputs_fn = None
            self.inputs_fn = None
            if spec.get("instance"):
                # an nn.Module target: the instance captured from the user's tests
                self.instance = torch.load(spec["instance"], weights_only=False)
                self.model_cls = type(self.instance)
                self.fn = None
            else:
                self.model_cls = None
                self.fn = getattr(obj, "__wrapped__", obj)  # the undecorated reference
            return
        module = _import_path(spec["path"], "maxcode_reference")
        if spec["kind"] == "module":
            model = getattr(module, spec.get("name") or "Model", None)
            if model is None:
                raise LookupError(f"{spec['path']} defines no class {spec.get('name') or 'Model'}")
            self.model_cls = model
            self.fn = None
            self.init_inputs_fn = getattr(module, "get_init_inputs", None)
            self.inputs_fn = getattr(module, "get_inputs", None)
        else:
            self.model_cls = None
            self.fn = getattr(module, spec["name"], None)
            if not callable(self.fn):
                raise LookupError(f"{spec['path']} defines no function {spec['name']}")
            self.init_inputs_fn = None
            self.inputs_fn = None
        if spec.get("inputs_path"):
            inputs_module = (
                module
                if os.path.abspath(spec["inputs_path"]) == os.path.abspath(spec["path"])
                else _import_path(spec["inputs_path"], "maxcode_reference_inputs")
            )
            self.inputs_fn = getattr(inputs_module, spec["inputs_name"], None)
            if not callable(self.inputs_fn):
                raise LookupError(f"{spec['inputs_path']} defines no function {spec['inputs_name']}")
        if self.inputs_fn is None:
            raise LookupError(
                f"{spec['path']} has no get_inputs(); pass --inputs FILE.py:FUNCTION"
            )

    def init_inputs(self) -> list:
        return list(self.init_inputs_fn()) if self.init_inputs_fn is not None else []

    def make(self, device: str, seed: int):
        """The callable to compare against, and the module's parameters+buffers (ABI order)."""
        if self.model_cls is None:
            return self.fn, []
        if getattr(self, "instance", None) is not None:
            model = copy.deepcopy(self.instance).to(device).eval()
        else:
            torch.manual_seed(seed)
            model = self.model_cls(*self.init_inputs()).to(device).eval()
        extras = [p.detach() for _, p in model.named_parameters()]
        extras += [b.detach() for _, b in model.named_buffers()]
        return model, extras


def _to_device(values: list, device: str) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _pack(result) -> str:
    """How the reference hands back its outputs, so an accepted kernel's call hands them back
    the same way: one bare tensor, a plain tuple or list of tensors, or anything else
    (a scalar, a named tuple), which only the reference reproduces."""
    if type(result) in (tuple, list):
        return type(result).__name__ if all(isinstance(r, torch.Tensor) for r in result) else "other"
    return "bare" if type(result) is torch.Tensor else "other"


def _as_outputs(result) -> list:
    if isinstance(result, (tuple, list)):
        items = list(result)
    else:
        items = [result]
    out = []
    for i, r in enumerate(items):
        if isinstance(r, torch.Tensor):
            out.append(r)
        elif isinstance(r, (bool, int, float)):
            out.append(torch.tensor(r))
        else:
            raise TypeError(f"output {i} is a {type(r).__name__}; outputs must be tensors or scalars")
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _count_flops(fn, inputs: list, device: str) -> int:
    """FLOPs of one reference call as torch's flop counter sees them: matmuls, convolutions
    and attention; elementwise work counts 0, so 0 means "no compute roof applies"."""
    try:
        # the reference job's alone: deferred, it keeps the zygote's start-up fast
        from torch.utils.flop_counter import FlopCounterMode

        _without_dynamo_import(FlopCounterMode)
        args = _to_device([_clone(v) for v in inputs], device)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            fn(*args)
        return int(counter.get_total_flops())
    except Exception:
        return 0


def _without_dynamo_import(counter: type) -> None:
    """Every dispatch mode's ``__torch_dispatch__`` is wrapped so that Dynamo never traces it,
    and the wrapper imports ``torch._dynamo`` on its first call: 1.2 to 1.6 s of a 2-core
    machine's reference job, on the path of every oracle's start, for a reference that compiles
    nothing. Where Dynamo is not loaded nothing can trace the mode, so the wrapper is handed the
    plain function it would otherwise import Dynamo to make; a torch whose wrapper looks
    different keeps its own (slower, same count)."""
    if "torch._dynamo" in sys.modules:
        return
    modes = [m for m in vars(sys.modules[counter.__module__]).values()
             if isinstance(m, type) and issubclass(m, torch.utils._python_dispatch.TorchDispatchMode)]
    for mode in modes:
        wrapper = mode.__dict__.get("__torch_dispatch__")
        raw = getattr(wrapper, "__wrapped__", None)
        code = getattr(wrapper, "__code__", None)
        if raw is not None and getattr(code, "co_qualname", "").startswith("_disable_dynamo."):
            raw.__dynamo_disable = raw


def _reference_job(job: dict, ref: Reference, conn: Connection) -> None:
    """Generate the seeded input sets and the expected outputs (kept by the parent only)."""
    device = job["device"]
    fn, _extras = ref.make(device, job["model_seed"])
    workloads = [_reference_workload(w, fn, ref, job) for w in job["workloads"]]
    # Files, not the channel: the zygote loads the inputs, and only the parent the
    # expected outputs (it deletes that file before any candidate runs).
    torch.save([{k: w[k] for k in ("name", "sets", "out_meta", "range")} for w in workloads], job["inputs_out"])
    torch.save([{k: w[k] for k in ("name", "expected", "out_meta", "in_bytes", "returns", "pack", "flops", "rejected", "generated", "range_expected")}
                for w in workloads], job["expected_out"])
    _send_child(conn, "reference")


def _reference_workload(w: dict, fn, ref: Reference, job: dict) -> dict:
    """One workload's input sets (captured, then generated from the run's seeds) and what the
    reference makes of them."""
    device = job["device"]
    sets = []
    if w.get("captured"):
        sets = [list(s) for s in torch.load(w["captured"], weights_only=True)["sets"]]
    n_captured = len(sets)
    for seed in w.get("seeds", []):
        torch.manual_seed(seed)
        sets.append(list(ref.inputs_fn()) if ref.inputs_fn is not None else _random_like(sets[0]))
    run = _ReferenceRuns(fn, device, bool(job["inplace"]))
    with torch.no_grad():
        for i, s in enumerate(sets):
            run.add(s, generated=i >= n_captured and ref.inputs_fn is None, fallback=sets[0])
    cpu_sets = [[v.to("cpu") if isinstance(v, torch.Tensor) else v for v in s] for s in run.kept]
    expected = run.expected
    out_meta = [(list(t.shape), str(t.dtype).replace("torch.", "")) for t in expected[0]]
    in_bytes = sum(v.numel() * v.element_size() for v in cpu_sets[0] if isinstance(v, torch.Tensor))
    ranged = _reference_ranges(fn, cpu_sets[0], expected[0], out_meta, job, device) if job["ranges"] else []
    return {
        "name": w["name"], "sets": cpu_sets, "expected": expected, "out_meta": out_meta,
        "in_bytes": in_bytes, "returns": run.returns, "pack": run.pack, "flops": _count_flops(fn, run.kept[0], device),
        "rejected": run.rejected, "generated": len(w.get("seeds", [])),
        "range": [(label, values) for label, values, _outs in ranged],
        "range_expected": [(label, outs) for label, _values, outs in ranged],
    }


class _ReferenceRuns:
    """The reference called on input sets one by one: the sets it took, its outputs, how it
    hands them back (``pack``; ``returns`` for an in-place target) and how many it refused."""

    def __init__(self, fn, device: str, inplace: bool) -> None:
        self.fn, self.device, self.inplace = fn, device, inplace
        self.kept: list = []
        self.expected: list = []
        self.returns: str | None = None
        self.pack: str | None = None
        self.rejected = 0

    def add(self, s: list, generated: bool, fallback: list) -> None:
        device = self.device
        args = _to_device([_clone(v) for v in s], device)
        try:
            result = self.fn(*args)
        except Exception:
            if not generated:
                raise
            # a generated set the reference rejects (a constraint between arguments, say):
            # the captured values reshuffled, else no such set
            s = _random_like(fallback, resample_only=True)
            args = _to_device([_clone(v) for v in s], device)
            try:
                result = self.fn(*args)
            except Exception:
                self.rejected += 1
                return
        self.kept.append(s)
        _sync(device)
        if self.inplace:
            # an in-place target's result is the state of its tensor arguments
            outs = [a for a in args if isinstance(a, torch.Tensor)]
            returns = _returned(result, args)
            before = [v for v in s if isinstance(v, torch.Tensor)]
            if all(_same_bits(b.to(device), a) for b, a in zip(before, outs)):
                returns = f"{returns}:unchanged"
            self.returns = returns
        else:
            outs = _as_outputs(result)
            this = _pack(result)
            self.pack = this if self.pack in (None, this) else "other"  # differing calls: only the reference can follow
        self.expected.append([o.detach().to("cpu").clone() for o in outs])


def _reference_ranges(fn, first: list, first_expected: list, out_meta: list, job: dict, device: str) -> list:
    """The range sets (``_maxcode_ranges``) the reference accepts, made from the first input set
    with the run's seed, with the reference's outputs on them: ``[(label, inputs, outputs)]``.
    A set the reference raises on, or whose outputs change shape, is not used."""
    kept = []
    with torch.no_grad():
        for label, values in ranges.range_sets(first, int(job["range_seed"])):
            args = _to_device([_clone(v) for v in values], device)
            try:
                result = fn(*args)
                _sync(device)
                outs = [a for a in args if isinstance(a, torch.Tensor)] if job["inplace"] else _as_outputs(result)
            except Exception:
                continue
            outs = [o.detach().to("cpu").clone() for o in outs]
            if not job["inplace"] and [(list(t.shape), str(t.dtype).replace("torch.", "")) for t in outs] != out_meta:
                continue
            if ranges.keep_set(label, first_expected, outs):
                kept.append((label, [v.to("cpu") if isinstance(v, torch.Tensor) else v for v in values], outs))
    return kept


#: a floating tensor with at most this many distinct values is treated as discrete (levels,
#: labels, masks stored as floats): its generated values are drawn from those values only
DISCRETE_VALUES = 16


def _random_like(values: list, resample_only: bool = False) -> list:
    """Fresh inputs shaped like captured ones (shapes, dtypes, strides), inside their value domain.

    A reference may reject part of its type's range (a log of non-positive numbers, an index
    out of bounds), so generated values never leave what the captured ones show: integers,
    booleans and discrete floats are resampled from the captured values; continuous floats are
    uniform within the observed [min, max] (the sign and any bound the tests respect are kept).
    ``resample_only`` resamples every tensor: the fallback when the reference rejected a set.
    """
    out = []
    for v in values:
        if not isinstance(v, torch.Tensor) or v.numel() == 0:
            out.append(v)
            continue
        flat = v.detach().reshape(-1)
        if resample_only or not (v.is_floating_point() or v.is_complex()) or not bool(torch.isfinite(flat).all()):
            fresh = _resample(flat, v.shape)
        elif v.is_complex():
            fresh = torch.complex(_uniform(flat.real, v.shape), _uniform(flat.imag, v.shape)).to(v.dtype)
        elif bool(torch.equal(flat, flat.round())) or flat.unique().numel() <= DISCRETE_VALUES:
            fresh = _resample(flat, v.shape)
        else:
            fresh = _uniform(flat, v.shape).to(v.dtype)
        like = torch.empty_like(v)  # keeps a dense tensor's strides (a transposed input stays transposed)
        like.copy_(fresh)
        out.append(like)
    return out


def _fresh_maker(values: list):
    """``_random_like(values)`` with each tensor's domain worked out once, not on every call
    (timed rounds ask for fresh values every round)."""
    plans = []
    for v in values:
        if not isinstance(v, torch.Tensor) or v.numel() == 0:
            plans.append(("keep", v))
            continue
        flat = v.detach().reshape(-1)
        if not (v.is_floating_point() or v.is_complex()) or not bool(torch.isfinite(flat).all()) or v.is_complex():
            plans.append(("resample", v, flat))
        elif bool(torch.equal(flat, flat.round())) or flat.unique().numel() <= DISCRETE_VALUES:
            plans.append(("resample", v, flat))
        else:
            plans.append(("uniform", v, float(flat.min()), float(flat.max())))

    def make() -> list:
        out = []
        for plan in plans:
            if plan[0] == "keep":
                out.append(plan[1])
                continue
            v = plan[1]
            if plan[0] == "resample":
                fresh = _resample(plan[2], v.shape)
            else:
                lo, hi = plan[2], plan[3]
                fresh = torch.rand(tuple(v.shape), dtype=torch.float64).mul_(hi - lo).add_(lo).clamp_(lo, hi)
            like = torch.empty_like(v)
            like.copy_(fresh)
            out.append(like)
        return out

    return make


def _resample(flat, shape):
    """Values drawn with replacement from the captured ones."""
    return flat[torch.randint(0, flat.numel(), tuple(shape))]


def _uniform(flat, shape):
    """Uniform within the captured values' [min, max], computed in float64 so the bounds hold."""
    lo, hi = float(flat.min()), float(flat.max())
    u = torch.rand(tuple(shape), dtype=torch.float64)
    return (lo + (hi - lo) * u).clamp_(lo, hi)


def _returned(result, args: list) -> str:
    """What an in-place reference returns: nothing, or one of its arguments (by position)."""
    if result is None:
        return "none"
    for i, a in enumerate(args):
        if result is a:
            return f"arg{i}"
    raise TypeError("an inplace=True target must return None or one of its arguments")


def _clone(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


# ----------------------------------------------------------------------------- candidates


class CandidateError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _timer_identities() -> dict[str, int]:
    """Ids of the clocks and syncs a cheating candidate would patch."""
    ids = {}
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time"):
        ids[f"time.{name}"] = id(getattr(time, name))
    ids["torch.cuda.synchronize"] = id(torch.cuda.synchronize)
    ids["torch.cuda.Event"] = id(torch.cuda.Event)
    ids["torch.cuda.Event.record"] = id(torch.cuda.Event.record)
    ids["torch.cuda.Event.elapsed_time"] = id(torch.cuda.Event.elapsed_time)
    ids["torch.cuda.Event.synchronize"] = id(torch.cuda.Event.synchronize)
    return ids


def _patched(before: dict[str, int]) -> list[str]:
    now = _timer_identities()
    return sorted(k for k, v in before.items() if now.get(k) != v)


def _poison(t, variant: int) -> None:
    if t.dtype == torch.bool:
        t.fill_(variant % 2 == 0)
    elif t.is_floating_point() or t.is_complex():
        v = (float("nan"), torch.finfo(t.dtype).max / 2 if t.is_floating_point() else 1e30, -12345.678)
        t.fill_(v[variant % 3])
    else:
        info = torch.iinfo(t.dtype)
        t.fill_(info.max if variant % 2 == 0 else info.min + 7)


def _bits(t):
    """A view whose == is bitwise (NaN == NaN), for mutation and settle checks."""
    by_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(by_size[t.element_size()])


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(_bits(a), _bits(b)))


def _native_abi():
    """The package's ``native/abi.py``, loaded by path: the same marshalling the runtime dispatcher
    uses, without importing the package (whose ``__init__`` would run in the sandbox)."""
    name = "_maxcode_abi"
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "native", "abi.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _load_call_path(fd: int) -> str:
    """Load the compiled call path from the sealed copy the trusted side verified, here in the
    zygote before any candidate exists, so every child inherits it; "compiled", or why ctypes."""
    try:
        _native_abi().use_helper(f"/proc/self/fd/{fd}")
        return "compiled"
    except (ImportError, OSError) as e:
        return f"ctypes: the compiled call path does not load ({_one_line_exc(e)})"
    finally:
        os.close(fd)


class _Candidate:
    """A loaded candidate behind one call signature: run(slot inputs, slot outputs)."""

    def __init__(self, job: dict, ref: Reference) -> None:
        self.device = job["device"]
        self.format = job["format"]
        self.stream = None
        start = _NOW()
        if self.format == "native":
            abi = _native_abi()
            self.abi = abi
            try:
                self.kernel = abi.NativeKernel(job["path"])
            except abi.AbiError as e:
                raise CandidateError("compile_error", str(e)) from None
            except OSError as e:
                raise CandidateError("compile_error", f"cannot load the built library: {e}") from None
            if self.device == "cuda":
                self.stream = torch.cuda.current_stream().cuda_stream
        else:
            _guard_load_inline(job["build_dir"])
            try:
                module = _import_path(job["path"], "maxcode_candidate")
            except Exception as e:
                status = "compile_error" if _is_build_error(e) else "runtime_error"
                raise CandidateError(status, _one_line_exc(e)) from None
            target = getattr(module, "ModelNew", None)
            if target is None and ref.fn is not None:
                target = getattr(module, ref.fn.__name__, None)
            if target is None:
                raise CandidateError("compile_error", "the compat candidate defines no ModelNew")
            if isinstance(target, type):
                try:
                    torch.manual_seed(job["model_seed"])
                    instance = getattr(ref, "instance", None)
                    if instance is not None and hasattr(target, "maxcode_from"):
                        # built around its own copy of the captured module, as the runtime
                        # dispatcher builds it around the live one (constructor arguments and all)
                        target = target.maxcode_from(copy.deepcopy(instance).to(self.device).eval())
                    else:
                        target = target(*ref.init_inputs()).to(self.device).eval()
                        if instance is not None and hasattr(target, "load_state_dict"):
                            # the captured module's weights, as the runtime dispatcher loads the live module's
                            target.load_state_dict(instance.state_dict(), strict=False)
                except Exception as e:
                    status = "compile_error" if _is_build_error(e) else "runtime_error"
                    raise CandidateError(status, _one_line_exc(e)) from None
            self.call = target
        self.load_s = (_NOW() - start) / 1e9


def _is_build_error(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}"
    return "Error building extension" in text or ("ninja" in text.lower() and "error" in text.lower())


def _one_line_exc(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    msg = lines[-1] if lines else ""
    for ln in lines:
        if "error" in ln.lower():
            msg = ln.strip()
            break
    return f"{type(e).__name__}: {msg}"[:400]


def _guard_load_inline(build_dir: str) -> None:
    """Make torch's load_inline safe to call from a candidate (DESIGN.md section 4).

    Each call builds in its own directory named by a hash of what it compiles (so two
    candidates that reuse a module name never get each other's module), the caller's
    source lists are copied (load_inline mutates them), precompiled headers are off
    (they write into torch's own include folder), and stale ``lock`` files are removed.
    """
    # only load_inline candidates need it (it pulls in setuptools): deferred, it keeps the zygote's start-up fast
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline

    def load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
        cu = None if cuda_sources is None else ([cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources))
        h = hashlib.sha256(repr((name, cpp, cu, args, sorted(kwargs.items(), key=lambda kv: kv[0]))).encode())
        digest = h.hexdigest()[:16]
        directory = os.path.join(build_dir, f"{name}_{digest}")
        os.makedirs(directory, exist_ok=True)
        lock = os.path.join(directory, "lock")
        if os.path.exists(lock):
            os.unlink(lock)
        kwargs["build_directory"] = directory
        kwargs["use_pch"] = False
        return original(f"{name}_{digest}", cpp, cu, *args, **kwargs)

    cpp_extension.load_inline = load_inline


class _Impl:
    """One implementation as this process calls it: a native candidate's loaded kernel or a
    Python callable (``runner``), the parameters handed to it after the inputs (``extras``),
    and the device it runs on. They travel together through every kind of call made here."""

    def __init__(self, runner, extras: list, native: bool, device: str) -> None:
        self.runner = runner
        self.extras = extras
        self.native = native
        self.device = device


class _Side:
    """One implementation (reference or candidate) with its own input/output buffers.

    ``slots`` sets of buffers; before each sample every slot is refilled, in place, with
    a different input set, so a result cached per pointer or replayed from an earlier
    call is wrong, and outputs are poisoned so unwritten output is visible.
    """

    def __init__(self, impl: _Impl, sets: list, slots: int, out_meta: list, preallocated: bool = False,
                 inplace: bool = False) -> None:
        self.inplace = inplace
        if inplace:
            out_meta, preallocated = [], False  # it writes into its arguments
        self.sets = sets
        device = self.device = impl.device
        self.runner, self.extras, self.native = impl.runner, impl.extras, impl.native
        # correctness calls write into preallocated, poisoned buffers; timed calls go through
        # the same allocate-marshal-run path as the runtime dispatcher
        self.preallocated = impl.native and preallocated
        self.bufs = [[_clone(v) for v in _to_device(sets[0], device)] for _ in range(slots)]
        self.out_meta = [(shape, getattr(torch, dt)) for shape, dt in out_meta]
        self.outs: list = [None] * slots
        if self.preallocated:
            abi = self.runner.abi
            self.outs = [[torch.empty(shape, dtype=dt, device=device) for shape, dt in self.out_meta] for _ in range(slots)]
            self.in_arrays = [abi.TensorArray(abi.as_abi_tensors(b, device) + self.extras) for b in self.bufs]
            self.out_arrays = [abi.TensorArray(o) for o in self.outs]

    def refill(self, first_set: int, poison: int) -> list[int]:
        """Fill each slot from the next set; returns the set index used by each slot."""
        used = []
        for s, buf in enumerate(self.bufs):
            idx = (first_set + s) % len(self.sets)
            for dst, src in zip(buf, self.sets[idx]):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)
            if self.preallocated:
                for o in self.outs[s]:
                    _poison(o, poison + s)
            else:
                self.outs[s] = None
            used.append(idx)
        return used

    def run(self, slot: int) -> None:
        if self.preallocated:
            rc = self.runner.kernel.run(self.in_arrays[slot], self.out_arrays[slot], self.runner.stream)
            if rc != 0:
                raise CandidateError("runtime_error", f"maxcode_run returned {rc}")
        elif self.native:
            abi = self.runner.abi
            try:
                self.outs[slot] = abi.call_native(
                    self.runner.kernel, self.bufs[slot], self.extras, self.out_meta, self.device, self.runner.stream
                )
            except abi.KernelError as e:
                raise CandidateError("runtime_error", str(e)) from None
        else:
            self.outs[slot] = self.runner(*self.bufs[slot])

    def outputs(self, slot: int) -> list:
        if self.inplace:
            return [v for v in self.bufs[slot] if isinstance(v, torch.Tensor)]
        return self.outs[slot] if self.native else _as_outputs(self.outs[slot])

    def discard(self) -> None:
        """Poison freshly allocated outputs before freeing them.

        Otherwise an allocator could hand that memory, still holding the right answer,
        to a kernel that allocates its output and never writes it.
        """
        if self.preallocated or self.inplace:
            return
        for s, o in enumerate(self.outs):
            if o is not None:
                for t in _as_outputs(o):
                    _poison(t, 0)
            self.outs[s] = None


def _candidate_job(job: dict, ref: Reference, inputs: list, conn: Connection) -> None:
    torch.set_grad_enabled(False)
    device = job["device"]
    before = _timer_identities()
    ref_fn, extras_ref = ref.make(device, job["model_seed"])
    _send_child(conn, "stage", what="load")
    cand = _Candidate(job, ref)
    patched = _patched(before)
    if patched:
        raise CandidateError("rejected", "the candidate replaced " + ", ".join(patched))
    _send_child(conn, "loaded", load_s=float(cand.load_s))
    native = job["format"] == "native"
    inplace = bool(job["inplace"])
    # the candidate's own copy of the parameters: it never shares an allocation with the reference
    extras_cand = ref.make(device, job["model_seed"])[1] if native else []
    me = os.getpid()
    impl = _Impl(cand if native else cand.call, extras_cand, native, device)
    for w in inputs:
        if not _check_sets(w, impl, inplace, float(job["settle_s"]), conn):
            return
        left = _descendants({me})
        if left:
            raise CandidateError("rejected", f"the candidate left {len(left)} process(es) running")
    for w in inputs if job["ranges"] else []:
        _run_ranges(w, impl, inplace, conn)

    gc.collect()
    gc.disable()  # a collection inside a timed call is noise, not the kernel's cost
    if job["timer"] == "instructions":
        for w in inputs:
            _send_child(conn, "stage", what=f"count {w['name']}")
            _count_workload(job, w, _Impl(ref_fn, extras_ref, False, "cpu"), _Impl(cand, extras_cand, True, "cpu"), conn)
    else:
        # the trusted side holds the clock: it rings, this process serves the calls
        _send_child(conn, "stage", what="timing")
        _send_child(conn, "serving")
        _Server(conn, _candidate_call(impl), device, inplace).serve()
    gc.enable()

    patched = _patched(before)
    if patched:
        raise CandidateError("rejected", "the candidate replaced " + ", ".join(patched))
    left = _descendants({me})
    if left:
        raise CandidateError("rejected", f"the candidate left {len(left)} process(es) running")
    _send_child(conn, "done")


def _check_sets(w: dict, impl: _Impl, inplace: bool, settle: float, conn: Connection) -> bool:
    """The candidate's outputs on each of the workload's input sets, refilled into the same
    buffers in turn, for the trusted side to compare; False when the trusted side says stop."""
    sets, device = w["sets"], impl.device
    side = _Side(impl, sets, 1, w["out_meta"], preallocated=True, inplace=inplace)
    for i in range(len(sets)):
        _send_child(conn, "stage", what=f"check {w['name']} set {i}")
        side.refill(i, poison=i)
        pristine = [_clone(v) for v in side.bufs[0]] + [e.clone() for e in impl.extras]
        t0 = _NOW()
        side.run(0)
        _sync(device)
        call_s = (_NOW() - t0) / 1e9
        outs = side.outputs(0)
        snap = [o.detach().clone() for o in outs]
        _SLEEP(max(settle, min(0.05, 3 * call_s)))
        _sync(device)
        if not all(_same_bits(a, b) for a, b in zip(outs, snap)):
            raise CandidateError("rejected", "the output changed after the call returned (work left running on another thread)")
        now_inputs = list(side.bufs[0]) + list(impl.extras)
        for k, (a, b) in enumerate(zip(pristine, now_inputs)):
            if inplace and k < len(side.bufs[0]):
                continue  # writing into its arguments is what an in-place target does
            if isinstance(a, torch.Tensor) and not _same_bits(a, b):
                raise CandidateError("rejected", f"the candidate modified input {k}")
        _send_child(conn, "outputs", workload=w["name"], set=i, outputs=[s.to("cpu") for s in snap])
        reply, _ = conn.recv()
        if reply != "ok":
            return False
    return True


def _run_ranges(w: dict, impl: _Impl, inplace: bool, conn: Connection) -> None:
    """The candidate's outputs on the workload's range sets, for the trusted side to compare;
    a call that raises is reported as such (range-limited, not a failed candidate)."""
    ranged = w.get("range") or []
    if not ranged:
        return
    side = _Side(impl, [values for _label, values in ranged], 1, w["out_meta"], preallocated=True, inplace=inplace)
    for i, (label, _values) in enumerate(ranged):
        _send_child(conn, "stage", what=f"range {w['name']} {label}")
        side.refill(i, poison=i)
        try:
            side.run(0)
            _sync(impl.device)
            outs, raised = [o.detach().to("cpu").clone() for o in side.outputs(0)], ""
        except Exception as e:
            outs, raised = [], (str(e) if isinstance(e, CandidateError) else _one_line_exc(e)) or type(e).__name__
        _send_child(conn, "range", workload=w["name"], label=label, outputs=outs, raised=raised)
    side.discard()


class _Callgrind:
    """Instruction counts per call from callgrind dumps (the process runs under valgrind)."""

    def __init__(self, shim: str, out_dir: str) -> None:
        self.lib = ctypes.CDLL(shim)
        self.lib.maxcode_cg_dump.argtypes = [ctypes.c_char_p]
        if not self.lib.maxcode_cg_running():
            raise CandidateError("runtime_error", "--timer instructions: the worker is not running under valgrind")
        self.lib.maxcode_cg_start()  # a no-op when already instrumenting
        self.prefix = os.path.join(out_dir, f"cg.{os.getpid()}.")
        self.dumps = 0

    def count(self, run, *args) -> int:
        self.lib.maxcode_cg_toggle()
        run(*args)
        self.lib.maxcode_cg_toggle()
        self.lib.maxcode_cg_dump(b"maxcode")
        self.dumps += 1
        path = f"{self.prefix}{self.dumps}"
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1])
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise CandidateError("runtime_error", f"callgrind wrote no count to {path}")


def _count_workload(job: dict, w: dict, ref: _Impl, cand: _Impl, conn: Connection) -> None:
    """Deterministic timing: callgrind instruction counts, alternating, rotating inputs."""
    cg = _Callgrind(job["callgrind_shim"], job["callgrind_dir"])
    inplace = bool(job["inplace"])
    sides = {"ref": _Side(ref, w["sets"], 1, w["out_meta"], inplace=inplace),
             "cand": _Side(cand, w["sets"], 1, w["out_meta"], inplace=inplace)}
    for side in sides.values():  # warm-up: first-call costs (lazy binding, page faults) are not the kernel's
        side.refill(0, 0)
        side.run(0)
        side.discard()
    samples: dict[str, list[int]] = {"ref": [], "cand": []}
    rechecks = []
    for r in range(int(job["instruction_rounds"])):
        for who in (("ref", "cand") if r % 2 == 0 else ("cand", "ref")):
            side = sides[who]
            used = side.refill(r + (who == "cand"), poison=r)
            samples[who].append(cg.count(side.run, 0))
            if who == "cand":
                rechecks.append([used[0], [o.detach().clone() for o in side.outputs(0)]])
            side.discard()
    _send_child(conn, "counts", workload=w["name"], reference=samples["ref"], candidate=samples["cand"], rechecks=rechecks)


def _candidate_call(impl: _Impl):
    """The call the candidate serves: for native code, the runtime dispatcher's own path
    (allocate the outputs, marshal, run), writing into the shared slots where it can."""
    cand, extras, device = impl.runner, impl.extras, impl.device

    def make(out_meta: list, direct: bool):
        metas = [(shape, getattr(torch, dt)) for _t, shape, _stride, dt in out_meta]
        if impl.native:
            abi = cand.abi
            if direct:

                def into(args: list, outs: list) -> None:
                    # the dispatcher's allocation (metas), then the call writing into the slots: same cost
                    rc = abi.call_into(cand.kernel, args, extras, outs, metas, device, cand.stream)
                    if rc != 0:
                        raise CandidateError("runtime_error", f"maxcode_run returned {rc}")

                return _Call(into=into)

            def call(args: list) -> list:
                try:
                    return abi.call_native(cand.kernel, args, extras, metas, device, cand.stream)
                except abi.KernelError as e:
                    raise CandidateError("runtime_error", str(e)) from None

            return _Call(returns=call)
        return _Call(returns=lambda args: cand(*args))

    return make


class _Call:
    """How a server's call delivers its results: into the slots, or returned (then copied)."""

    def __init__(self, into=None, returns=None, late: bool = False) -> None:
        self.into = into
        self.returns = returns
        #: copy returned results after answering: only the trusted reference, and only when
        #: the candidate it is compared with writes into its slots (pays no copy) either
        self.late = late


def _python_call(fn):
    """The reference's call: it copies its results inside the interval exactly when the
    candidate has to, so the copy weighs on both sides or on neither."""
    return lambda out_meta, direct: _Call(returns=lambda args: fn(*args), late=direct)


class _Server:
    """Serves the trusted side's timed calls through shared memory until it says "finish".

    Messages from the parent are commands (it is trusted); every answer is an event it
    validates. The clock is the parent's: this loop only arms, waits for the doorbell,
    runs the slots and writes the bell's token back.
    """

    def __init__(self, conn: Connection, make_call, device: str, inplace: bool, stage=None) -> None:
        self.conn, self.make_call, self.device, self.inplace, self.stage = conn, make_call, device, inplace, stage
        self.region = None
        self.call: _Call | None = None
        self.mirrors = None  # on a GPU: each slot's inputs on the device (the shared slots are host memory)
        self.stager: _Stager | None = None
        self.pinned = False

    def serve(self) -> None:
        conn = self.conn
        # a random shift of where this process's allocations land: how its buffers alias in the
        # caches then varies from process to process instead of favouring one side for a whole run
        shift = torch.empty(64 * (1 + int.from_bytes(os.urandom(2), "little") % 1024), dtype=torch.uint8)
        while True:
            name, kw = conn.recv()
            if name == "map":
                self._map(kw["layout"], bool(kw["direct"]))
                _send_child(conn, "mapped", pinned=self.pinned)
            elif name == "stage" and self.stager is not None:
                _send_child(conn, "staged", fresh=self.stager.run(kw["workload"], kw["plan"], int(kw["first"])))
            elif name == "round":
                self._round(int(kw["n"]), int(kw["rid"]))
            elif name == "flush":
                _flush_l2(self.device)
                _send_child(conn, "flushed")
            elif name == "finish":
                del shift
                self._unpin()
                if self.stager is not None:
                    self.stager.close()
                return

    def _unpin(self) -> None:
        if self.pinned:
            if int(torch.cuda.cudart().cudaHostUnregister(self.region.base)) != 0:
                _clear_cuda_error()  # the pages stay locked until this process exits: harmless
            self.pinned = False

    def _map(self, layout: dict, direct: bool) -> None:
        """A workload's slots (replacing the previous workload's) and the call that serves them."""
        fd = recv_handle(self.conn)
        if self.region is not None:
            self._unpin()
            self.region.close()
        region = self.region = shm.Region(fd, layout)
        os.close(fd)
        self.call = self.make_call(region.layout["out_meta"], direct)
        if self.stage is not None:
            if self.stager is not None:
                self.stager.close()
            self.stager = _Stager(self.stage, region)  # forked before the pages are locked
        if self.device != "cpu":
            self.pinned = _pin(region)
            self.mirrors = [[t.to(self.device) if isinstance(t, torch.Tensor) else t for t in slot] for slot in region.inputs]

    def _round(self, n: int, rid: int) -> None:
        region, mirrors = self.region, self.mirrors
        if mirrors is not None:  # host to device before the bell: the copy is not the kernel's
            for s in range(n):
                for d, h in zip(mirrors[s], region.inputs[s]):
                    if isinstance(d, torch.Tensor):
                        d.copy_(h)
            _sync(self.device)
        late: list = []
        if shm.serve_round(region, rid, lambda: self._calls(n, late)):
            for s, result in late:
                _copy_results(region, s, result, self.inplace)
            region.ctl[shm.READY] = rid
            shm.notify(region.ctl, region.base, shm.READY)

    def _calls(self, n: int, late: list) -> None:
        """The timed calls. Results not written into the slots are copied there inside the
        interval, except where the call says ``late``: kept in ``late`` and copied after answering."""
        region, call, mirrors, inplace = self.region, self.call, self.mirrors, self.inplace
        for s in range(n):
            args = region.inputs[s] if mirrors is None else mirrors[s]
            if call.into is not None:
                call.into(args, region.outputs[s])
                continue
            result = call.returns(args)
            if inplace:
                if mirrors is not None:
                    late.append((s, [a for a in args if isinstance(a, torch.Tensor)]))
                continue
            if call.late:
                late.append((s, result))
            else:
                _copy_results(region, s, result)
        _sync(self.device)
        if mirrors is not None and not call.late:  # a candidate's device results reach the host inside the interval
            for s, result in late:
                _copy_results(region, s, result, inplace)
            late.clear()


class _Stager:
    """The reference's input writing, in a process and session of its own.

    The process that is timed then does nothing but its calls, like the candidate's: the
    scheduler charges a session for the CPU it used, and a server that also generated every
    round's inputs would lose its wake-up credit to other load and look slower than it is.
    """

    def __init__(self, stage, region) -> None:
        a, b = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            a.close()
            os.setsid()
            _die_with_parent(0)
            conn = Connection(b.detach())
            try:
                while True:
                    msg = conn.recv()
                    if msg is None:
                        break
                    conn.send(bool(stage(region, **msg)))
            except EOFError:
                pass
            os._exit(0)
        b.close()
        self.pid = pid
        self.conn = Connection(a.detach())

    def run(self, workload: str, plan: list, first: int) -> bool:
        self.conn.send({"workload": workload, "plan": plan, "first": first})
        return self.conn.recv()

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.conn.close()
        except OSError:
            pass
        os.waitpid(self.pid, 0)


def _pin(region) -> bool:
    """Page-lock the shared slots on a GPU. The timed interval holds the device-to-host copy of
    the results (the trusted side reads them when the clock stops), and from pageable memory that
    copy goes through a bounce buffer at a fraction of the bus's speed: for a bandwidth-bound
    kernel it would be most of what both sides are timed for."""
    try:
        if int(torch.cuda.cudart().cudaHostRegister(region.base, region.layout["size"], 0)) == 0:
            return True
    except Exception:  # a torch whose cudart bindings are missing: the copy stays pageable
        return False
    _clear_cuda_error()  # a refusal leaves its error set, and torch's next launch would raise it
    return False


def _clear_cuda_error() -> None:
    """cudaGetLastError from the libcudart this process loaded (global in pip's torch; else
    found by its path in the process's mappings)."""
    libs: list[str | None] = [None]
    try:
        with open("/proc/self/maps") as maps:
            libs += sorted({f for f in (line.split()[-1] for line in maps if line.strip()) if "/libcudart" in f})
    except OSError:
        pass
    for lib in libs:
        try:
            ctypes.CDLL(lib).cudaGetLastError()
            return
        except (OSError, AttributeError):
            continue


def _copy_results(region, s: int, result, inplace: bool = False) -> None:
    if inplace:
        for h, d in zip([t for t in region.inputs[s] if isinstance(t, torch.Tensor)], result):
            h.copy_(d)
        return
    outs = _as_outputs(result)
    dsts = region.outputs[s]
    if len(outs) != len(dsts):
        raise CandidateError("wrong", f"returned {len(outs)} output(s), the reference returns {len(dsts)}")
    for k, (dst, src) in enumerate(zip(dsts, outs)):
        if tuple(src.shape) != tuple(dst.shape):
            raise CandidateError("wrong", f"output {k} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
        dst.copy_(src)


def _flush_l2(device: str) -> None:
    """Evict the GPU's L2 between rounds (device-wide, so it serves both sides)."""
    if device != "cuda":
        return
    global _L2_FLUSH
    if _L2_FLUSH is None:
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        _L2_FLUSH = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device="cuda")
    _L2_FLUSH.zero_()
    torch.cuda.synchronize()


_L2_FLUSH = None


def _serve_reference(job: dict, ref: Reference, inputs: list, conn: Connection) -> None:
    """The reference, served exactly like a candidate; a helper process of its own writes each
    round's fresh inputs."""
    torch.set_grad_enabled(False)
    device = job["device"]
    fn, _extras = ref.make(device, job["model_seed"])
    pools = {w["name"]: w["sets"] for w in inputs}

    makers: dict = {}

    def stage(region, workload: str, plan: list, first: int) -> bool:
        """Write each slot's input set (fresh values from a seed, or pooled set idx) to the
        staging area; the trusted side copies them into each side's slots right before its call."""
        template = pools[workload][0]
        fresh_all = True
        for slot, (kind, value) in enumerate(plan):
            values = None
            if kind == "fresh":
                torch.manual_seed(int(value))
                if ref.inputs_fn is not None:
                    values = list(ref.inputs_fn())
                else:
                    if workload not in makers:
                        makers[workload] = _fresh_maker(template)
                    values = makers[workload]()
                if not _fits(values, region.staged[first + slot]):
                    values = None
            if values is None:
                fresh_all = fresh_all and kind != "fresh"
                pool = pools[workload]
                values = pool[int(value) % len(pool)]
            for stg, src in zip(region.staged[first + slot], values):
                if isinstance(stg, torch.Tensor):
                    stg.copy_(src)
        return fresh_all

    gc.collect()
    gc.disable()
    _send_child(conn, "serving")
    _Server(conn, _python_call(fn), device, bool(job["inplace"]), stage=stage).serve()
    _send_child(conn, "done")


def _fits(values: list, views: list) -> bool:
    if len(values) != len(views):
        return False
    for v, d in zip(values, views):
        if isinstance(d, torch.Tensor) != isinstance(v, torch.Tensor):
            return False
        if isinstance(d, torch.Tensor) and (tuple(v.shape) != tuple(d.shape) or v.dtype != d.dtype):
            return False
    return True


# ----------------------------------------------------------------------------- child / zygote


def _dumpable(on: bool) -> None:
    """Whether a process of the same user may ptrace this one. The worker is not: a candidate
    (its child, same user, no capability) could otherwise attach to it and run its own code in
    every child forked after, later candidates' included. A child is again, for its own tools."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _die_with_parent(parent: int) -> None:
    """If our parent dies (even by SIGKILL), so do we: no orphaned workers or hung kernels.

    ``parent`` 0: we run in a PID namespace, where the parent's pid is not ours to check;
    the sandbox's root then dies with it and takes the namespace along.
    """
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        os._exit(1)


#: the keys the trusted side sends in every job of each kind (``Oracle._limits`` and ``Oracle._job``
#: in ``oracle/check.py``): the worker fills in no defaults, so one missing is the parent's bug
_LIMIT_KEYS = ("kind", "device", "model_seed", "max_memory", "cpu_seconds", "max_file_bytes", "inplace")
_JOB_KEYS = {
    "reference": (*_LIMIT_KEYS, "workloads", "ranges", "range_seed", "inputs_out", "expected_out"),
    "serve_reference": _LIMIT_KEYS,
    "candidate": (*_LIMIT_KEYS, "timer", "format", "path", "build_dir", "ranges", "settle_s", "instruction_rounds"),
}


def _protocol_error(job: dict) -> str | None:
    """What is wrong with a job the trusted side sent, in one line; None when it is whole."""
    kind = job.get("kind")
    if kind not in _JOB_KEYS:
        return f"protocol error: the trusted side sent a job of unknown kind {kind!r} (a maxcode bug; please report it)"
    missing = [k for k in _JOB_KEYS[kind] if k not in job]
    if missing:
        return (f"protocol error: the trusted side sent a {kind} job without {', '.join(missing)} "
                "(a maxcode bug; please report it)")
    return None


def _child(job: dict, chan_fd: int, out_fd: int, workdir: str, ref: Reference | None, inputs, zygote: int) -> None:
    """A forked job's whole life, ended by ``_exit``. Seven parameters because each is one thing
    the zygote hands the child across the fork (its channel, its output pipe, its folder, what
    the zygote loaded) and a bundle would exist only to be unpacked here."""
    _die_with_parent(zygote)
    _dumpable(True)
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    os.chdir(workdir)
    os.environ["TMPDIR"] = workdir
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    conn = Connection(chan_fd)
    try:
        why = _protocol_error(job)
        if why:
            _report(conn, "runtime_error", why)
            return
        _set_limits(job)
        if job["device"] == "cuda":
            torch.cuda.init()
        if job["kind"] == "reference":
            _reference_job(job, ref, conn)
        elif job["kind"] == "serve_reference":
            _serve_reference(job, ref, inputs, conn)
        else:
            _candidate_job(job, ref, inputs, conn)
    except CandidateError as e:
        _report(conn, e.status, str(e))
    except MemoryError:
        _report(conn, "runtime_error", "MemoryError: the memory limit was reached")
    except BaseException as e:  # noqa: BLE001 - everything a candidate raises is a verdict
        _report(conn, "runtime_error", _one_line_exc(e), traceback.format_exc(limit=8))
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(0)


def _report(conn: Connection, status: str, message: str, detail: str = "") -> None:
    try:
        _send_child(conn, "error", status=status, message=message, detail=detail[-4000:])
    except Exception:
        pass


def _decode_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _load_compiler(vec_isa_ok: bool) -> None:
    """Dynamo and Inductor imported once here, where every later job's child inherits them: a
    ``torch.compile`` candidate's blocks and confirmations are fresh children, and each imported
    them again (2 s on the 2-core VM; its compiled code is cached in /tmp for its next blocks).
    Decorating compiles nothing, and starts no thread in this process that forks.

    Inductor's probe of the CPU's vector instructions is settled here too: it builds a test
    program per instruction set and loads each in a fresh Python (6 s on the 2-core VM), and
    keeps its answer in memory only, so every candidate's first compile repeated it in its own
    child. Where the trusted side found that every set the CPU lists passes (``vec_isa_ok``,
    measured once per machine) the probe is skipped; otherwise it runs here, once, on no
    candidate code, its files going to this candidate's job folder."""
    try:
        torch.compile(lambda x: x)
        import torch._inductor.config as inductor_config
        from torch._inductor import cpu_vec_isa

        if vec_isa_ok:
            inductor_config.cpp.vec_isa_ok = True
        cpu_vec_isa.pick_vec_isa()
    except Exception:  # noqa: BLE001 - a torch that cannot compile here: the child says why
        pass


def main(ctl_fd: int, parent: int) -> None:
    _die_with_parent(parent)
    ctl = socket.socket(fileno=ctl_fd)
    try:
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    _name, kw, fds = _recv_ctl(ctl)
    ref = None
    try:
        call_path = _load_call_path(fds[0]) if fds else "ctypes: the trusted side sent no compiled call path"
        ref = Reference(kw["reference"])
        shared = _shared_places(list(kw.get("clear") or []))
        _keep_to_server_cores()
        _send_ctl(ctl, "ready", python=sys.version.split()[0], torch=torch.__version__, call_path=call_path)
    except BaseException as e:  # noqa: BLE001
        _send_ctl(ctl, "setup_error", message=_one_line_exc(e), detail=traceback.format_exc(limit=6)[-3000:])
        return
    _dumpable(False)
    inputs = None
    owner = None  # the candidate whose jobs ran last
    compiler_loaded = False
    while True:
        name, kw, fds = _recv_ctl(ctl)
        if name == "exit":
            return
        if name == "inputs":
            with open(kw["path"], "rb") as f:
                inputs = torch.load(f, weights_only=True)
            # children inherit all of this: frozen, their collections skip it (and its pages stay shared)
            gc.collect()
            gc.freeze()
            _send_ctl(ctl, "ok")
            continue
        if name == "fork":
            job_id, job = kw["job_id"], kw["job"]
            chan_fd, out_fd = fds
            # before another candidate's first job: the blocks of one candidate share their
            # caches (torch.compile's, in /tmp), different candidates share nothing; a reference
            # job's files are read after it, and are left
            if job.get("kind") == "candidate" and job.get("path") != owner:
                _clear(shared)
                owner = job.get("path")
                if not compiler_loaded and job.get("compiles") is True:
                    _load_compiler(job.get("vec_isa_ok") is True)
                    compiler_loaded = True
            workdir = tempfile.mkdtemp(prefix="maxcode-job-")
            me = os.getpid()
            pid = os.fork()
            if pid == 0:
                ctl.close()
                _child(job, chan_fd, out_fd, workdir, ref, inputs, me)
            os.close(chan_fd)
            os.close(out_fd)
            _send_ctl(ctl, "forked", job_id=job_id, pid=pid)
            _, status = os.waitpid(pid, 0)
            leftovers = _kill_leftovers(pid)
            shutil.rmtree(workdir, ignore_errors=True)
            _send_ctl(ctl, "exited", job_id=job_id, pid=pid, status=_decode_status(status), leftovers=leftovers)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
