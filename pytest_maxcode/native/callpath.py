"""The compiled call path (``callpath.cpp``): built once per torch version, by trusted code only.

A dispatched call through ``abi.call_native`` costs about 9 µs through ``struct`` and
``ctypes``; the compiled helper allocates the outputs, describes the tensors and calls the
kernel in one C call (well under 1 µs, then some for each tensor). It is built here, by the
process that runs the user's code or the oracle's trusted side, never by a candidate: the
source is this package's own, and the compiler sees nothing a candidate wrote.

Cache: ``$MAXCODE_CALLPATH_CACHE``, else ``$XDG_CACHE_HOME/pytest-maxcode/callpath``, else
``~/.cache/pytest-maxcode/callpath``; one folder per key (helper source, torch version,
Python ABI, compiler version, flags), shared by every project on the machine. The finished
folder appears by one rename, so a build that is interrupted or racing another leaves
nothing half-written. Its library's sha256 is recorded beside it; the library is loaded
only from a sealed memory copy of bytes that hashed to that record, and the oracle hands
the same sealed copy to its workers (a file descriptor, not a path), so no one can swap
what they load after the check. Under bubblewrap the cache is outside what a sandbox can
write, and under ``unshare`` it is read-only to them too; under ``none`` the whole filesystem
is writable (the verdict says so), and a replaced library with a rewritten record would be
loaded by a later process.

Where the helper cannot be built (no compiler, no Python headers), the ctypes path serves
every call, with one warning per process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from . import abi
from .build import sealed_memfd

SOURCE = Path(__file__).parent / "callpath.cpp"
LIBRARY = "_maxcode_call.so"
RECORD = "record.json"
FLAGS = ("-O2", "-std=c++20", "-fPIC", "-shared", "-w")
#: seconds a helper build may take (a 2-core runner under load needs about 15-30)
BUILD_TIMEOUT_S = 600.0
#: calls per measurement of the call path's own cost
OVERHEAD_CALLS = 2000

_state: dict[str, Any] = {}


def cache_root() -> Path:
    explicit = os.environ.get("MAXCODE_CALLPATH_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "pytest-maxcode" / "callpath"


def _compiler() -> str:
    return os.environ.get("CXX") or "g++"


@functools.cache
def _compiler_version(exe: str) -> str:
    try:
        return subprocess.run([exe, "--version"], check=False, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def key() -> str:
    """What the helper's binary depends on; a change of any gives a new cache folder."""
    parts = [SOURCE.read_bytes().hex(), torch.__version__, sysconfig.get_config_var("SOABI") or sys.version,
             _compiler_version(_compiler()), " ".join(FLAGS), str(int(torch._C._GLIBCXX_USE_CXX11_ABI))]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"torch{torch.__version__.replace('+', '_')}-{digest}"


def _command(out: Path) -> list[str]:
    # deferred: keeps start-up fast (cpp_extension imports setuptools, ~150 ms); only a build needs it
    from torch.utils import cpp_extension

    lib = Path(torch.__file__).parent / "lib"
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return [_compiler(), *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *[f"-I{p}" for p in includes], str(SOURCE), "-o", str(out),
            f"-L{lib}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(root: Path | None = None) -> Path:
    """The helper's folder for this key, built now if it is not cached; RuntimeError (one line) if it cannot be."""
    root = root or cache_root()
    folder = root / key()
    if (folder / RECORD).is_file():
        return folder
    failed = root / f"{folder.name}.failed"
    if failed.is_file():
        raise RuntimeError(failed.read_text()[:300] + f" (delete {failed} to try again)")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        cmd = _command(work / LIBRARY)
        start = time.monotonic()
        try:
            r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"{cmd[0]}: {e}") from None
        if r.returncode != 0:
            lines = [ln for ln in r.stderr.splitlines() if "error" in ln] or r.stderr.splitlines() or [f"exit {r.returncode}"]
            reason = f"the call-path helper does not build: {lines[0].strip()}"[:300]
            failed.write_text(reason)
            raise RuntimeError(reason)
        data = (work / LIBRARY).read_bytes()
        record = {"sha256": _sha256(data), "command": cmd, "build_s": round(time.monotonic() - start, 2)}
        (work / RECORD).write_text(json.dumps(record, indent=1))
        try:
            os.rename(work, folder)
        except OSError:
            if not (folder / RECORD).is_file():  # not another process's finished build: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def sealed_fd() -> int | None:
    """A sealed memory file with the verified helper (kept open for this process's life), or None.

    Builds the helper on first use; what is loaded, here and in the oracle's workers, is this
    copy of bytes that hashed to the build record.
    """
    if "fd" in _state:
        return _state["fd"]
    fd = None
    try:
        folder = build()
        record = json.loads((folder / RECORD).read_text())
        data = (folder / LIBRARY).read_bytes()
        if _sha256(data) != record.get("sha256"):
            raise RuntimeError(f"{folder / LIBRARY} changed since it was built (delete {folder} to build it again)")
        fd = sealed_memfd(data, f"maxcode-callpath-{record['sha256'][:16]}.so")
        _state["path"] = f"/proc/self/fd/{fd}" if fd is not None else str(folder / LIBRARY)
    except (RuntimeError, OSError, ValueError) as e:
        _fallback(str(e))
    _state["fd"] = fd
    return fd


def _fallback(reason: str) -> None:
    if "warned" not in _state:
        _state["warned"] = reason
        warnings.warn(f"maxcode: {reason}; native kernels are called through ctypes (about 9 µs per call "
                      "instead of about 1)", RuntimeWarning, stacklevel=3)


def load() -> Any:
    """The helper module in this process (building it first if needed), or None: the ctypes path then."""
    if abi.helper() is not None:
        return abi.helper()
    if "loaded" in _state:
        return None
    _state["loaded"] = True
    sealed_fd()
    path = _state.get("path")
    if path is None:
        return None
    try:
        return abi.use_helper(path)
    except (ImportError, OSError) as e:
        _fallback(f"the call-path helper does not load ({e})")
        return None


def fallback_reason() -> str:
    """Why this process uses the ctypes path ('' when it does not, or has not tried)."""
    return str(_state.get("warned", ""))


def overhead_us(in_meta: list, out_meta: list, device: str = "cpu", calls: int = OVERHEAD_CALLS) -> float | None:
    """Microseconds one dispatched call costs besides its kernel, for arguments laid out as
    ``in_meta`` (``shm.tensor_meta``'s entries) and outputs ``out_meta`` ((shape, dtype name)):
    the median of five runs of ``calls`` calls of a kernel that does nothing, through the
    path ``abi.call_native`` takes in this process. None without a no-op kernel to call."""
    helper = load()
    if helper is None:
        return None
    kernel = abi.NativeKernel.at_address(helper.noop_address())
    args = [torch.empty_strided(m[1], m[2], dtype=getattr(torch, m[3]), device=device) if m[0] == "t" else m[1]
            for m in in_meta]
    metas = [(tuple(shape), getattr(torch, dtype)) for shape, dtype in out_meta]
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
    call, now = abi.call_native, time.perf_counter_ns
    runs = []
    for _ in range(5):
        t0 = now()
        for _ in range(calls):
            call(kernel, args, (), metas, device, stream)
        runs.append((now() - t0) / calls / 1e3)
    return round(sorted(runs)[2], 3)
