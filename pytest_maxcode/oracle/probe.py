"""The machine's roofs: a STREAM-like memory-bandwidth probe and a GEMM FLOP/s probe,
measured once per machine and cached.

Achieved bytes/s of a candidate mean little alone; as a share of what this machine's
memory can do they tell whether a kernel is already near its roof.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .._files import write_atomic


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_fingerprint(device: str) -> dict[str, str]:
    info = {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "torch": torch.__version__,
        "device": device,
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _measure(device: str, nbytes: int = 256 << 20, reps: int = 5) -> float:
    n = nbytes // 4
    a = torch.ones(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(reps + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best  # one read and one write per element


def cache_dir() -> Path:
    """Per machine, not per project: ``$MAXCODE_CACHE_DIR`` or the user's cache folder."""
    if os.environ.get("MAXCODE_CACHE_DIR"):
        return Path(os.environ["MAXCODE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-maxcode"


def _measure_flops(device: str, n: int = 2048, reps: int = 3) -> float:
    a = torch.randn(n, n, dtype=torch.float32, device=device)
    b = torch.randn(n, n, dtype=torch.float32, device=device)
    best = float("inf")
    for _ in range(reps + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def cache_path(cache_dir: Path, fp: dict[str, str], suffix: str) -> Path:
    """A measurement's file in the machine cache, named by the fingerprint it holds for."""
    key = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / "machine" / f"{fp['device']}-{key}{suffix}.json"


def _cached(cache_dir: Path, device: str, name: str, measure: Callable[[str], float]) -> dict:
    fp = machine_fingerprint(device)
    path = cache_path(cache_dir, fp, "" if name == "bytes_per_s" else f"-{name}")
    if path.exists():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    result = {name: measure(device), "machine": fp, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _keep(path, result)
    return result


def _keep(path: Path, result: dict) -> None:
    """Cache a measurement; a cache folder this user cannot write costs the next run a
    measurement, not this run its verdicts."""
    try:
        write_atomic(path, json.dumps(result, indent=2))
    except OSError:
        pass


def bandwidth(cache_dir: Path, device: str) -> dict:
    """Measured copy bandwidth in bytes/s for ``device``, from the cache when present."""
    return _cached(cache_dir, device, "bytes_per_s", _measure)


def flops(cache_dir: Path, device: str) -> dict:
    """Measured float32 matmul FLOP/s for ``device`` (torch's own GEMM: the compute roof a
    candidate is held against), from the cache when present."""
    return _cached(cache_dir, device, "flops_per_s", _measure_flops)


#: when the cache sizes cannot be read, assume this much (generous: a larger cache only
#: makes the bandwidth roof more lenient)
UNKNOWN_CACHE_BYTES = 1 << 30


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@functools.cache
def _cpu_cache_bytes(root: str) -> int:
    instances: dict[tuple[str, str, str], int] = {}
    for index in glob.glob(os.path.join(root, "cpu[0-9]*", "cache", "index[0-9]*")):
        try:
            kind = Path(index, "type").read_text().strip()
            if kind == "Instruction":
                continue
            key = (Path(index, "level").read_text().strip(), kind, Path(index, "shared_cpu_list").read_text().strip())
            instances[key] = _size(Path(index, "size").read_text())
        except (OSError, ValueError):
            continue
    return sum(instances.values()) or UNKNOWN_CACHE_BYTES


def cache_bytes(device: str, root: str = "/sys/devices/system/cpu") -> int:
    """Bytes of data this machine can keep on chip between two calls.

    CPU: every data or unified cache instance of every level, summed (L2s and L3 slices of
    non-inclusive hierarchies hold different lines, and each socket has its own L3), read
    from sysfs. CUDA: the L2 (L1 and shared memory do not outlive a kernel launch). Used by
    the bandwidth roof: only bytes beyond this can be forced to come from memory."""
    if device == "cuda":
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
    return _cpu_cache_bytes(root)


#: run in a fresh interpreter: Inductor's own probe of each vector instruction set (a test
#: program built and loaded per set), then the sets it would take without probing
_VEC_ISA_PROBE = """
import json
import torch._inductor.config as config
from torch._inductor import cpu_vec_isa
config.cpp.vec_isa_ok = None
probed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
cpu_vec_isa.valid_vec_isa_list.cache_clear()
config.cpp.vec_isa_ok = True
print(json.dumps({"probed": probed, "listed": [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]}))
"""


def _compiler_fingerprint() -> str:
    """The C++ compiler Inductor calls (``$CXX`` or g++), by path, size and time: an upgrade is a new one."""
    path = shutil.which(os.environ.get("CXX") or "g++")
    if path is None:
        return "none"
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _vec_isa_fingerprint() -> dict[str, str]:
    return dict(machine_fingerprint("cpu"), compiler=_compiler_fingerprint())


def vector_isa_path(cache_dir: Path) -> Path:
    """Where :func:`vector_isa_ok` keeps this machine's and compiler's answer."""
    return cache_path(cache_dir, _vec_isa_fingerprint(), "-vec-isa")


def vector_isa_ok(cache_dir: Path, timeout: float = 300.0) -> bool | None:
    """Whether every vector instruction set this CPU lists passes Inductor's probe: then a
    worker can skip that probe (``config.cpp.vec_isa_ok``) and take the same sets. The probe
    builds and loads a test program per set (6 s on the 2-core VM), and Inductor keeps its
    answer in memory only, so each sandboxed worker that compiles repeated it; here it runs
    once per machine and compiler, in a process that never sees a candidate, and is cached.
    None where it could not run (the worker then probes as before); a failure is not cached."""
    path = vector_isa_path(cache_dir)
    try:
        return bool(json.loads(path.read_text())["vec_isa_ok"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    with tempfile.TemporaryDirectory(prefix="maxcode-vec-isa-") as tmp:
        env.update(TMPDIR=tmp, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
        try:
            # run from the empty folder: `python -c` puts the working folder first on its path
            out = subprocess.run([sys.executable, "-c", _VEC_ISA_PROBE], env=env, cwd=tmp, capture_output=True, text=True,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
            sets = json.loads(out.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
    if out.returncode != 0 or not isinstance(sets, dict):
        return None
    ok = bool(sets.get("probed")) and sets.get("probed") == sets.get("listed")
    result = {"vec_isa_ok": ok, "sets": sets, "machine": _vec_isa_fingerprint(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _keep(path, result)
    return ok
