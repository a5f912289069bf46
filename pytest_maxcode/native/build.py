"""Building native candidates: g++ / nvcc through one ninja file, cached by content hash.

The cache key covers the source, the flags, the compiler's version and the ABI header,
so a hit is always the same binary. Outputs are written under a private name and adopted
by this (trusted) process only once complete, so an interrupted build never leaves a
half-written library in the cache.

Libraries are content-addressed: the trusted side hashes each one as it adopts it, names
it ``lib-<sha256>.so`` and records the hash in ``<key>.json`` beside (not inside) the
build folder, which is the only place the compiler's sandbox can write. A cached library
is used only while it still hashes to that record, and :func:`verified_library` checks
again right before every load: a library overwritten since (by an unsandboxed candidate,
say) is rebuilt or refused, never loaded.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .._files import write_atomic
from ..errors import MaxcodeError
from ..sandbox.disk import FolderWatch
from ..sandbox.env import scrubbed_env
from ..sandbox.isolation import Isolation, Limits, prepare

INCLUDE_DIR = Path(__file__).parent / "include"
#: the callgrind client requests (toggle, dump) that instruction counting brackets a call with
CALLGRIND_SHIM = Path(__file__).parent / "callgrind_shim.cpp"
#: ``-fno-trapping-math``: without it g++ will not vectorize a loop holding a float compare
#: (``v < 0.f ? 0.f : v``, the NaN-keeping ReLU): it cannot prove the compare raises no FP
#: exception flag that the scalar loop would not. Results are the same; only flags differ.
DEFAULT_CXXFLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-trapping-math", "-std=c++17")
# valgrind cannot execute AVX-512; under --timer instructions native code targets AVX2
VALGRIND_CXXFLAGS = ("-O3", "-march=x86-64-v3", "-fopenmp", "-std=c++17")
DEFAULT_NVCCFLAGS = ("-O3", "-std=c++17")
MAX_ERRORS = 3
#: what one batch's compilers may write, all their files together (RLIMIT_FSIZE caps each
#: file at 1 GiB): an assembler told to ``.fill`` gigabytes would otherwise fill the disk
BUILD_BYTES = 2 << 30


@dataclass
class Source:
    path: Path
    lang: str  # "cpp" | "cuda"
    text: str = ""

    def __post_init__(self) -> None:
        if not self.text:
            self.text = self.path.read_text(errors="replace")


@dataclass
class BuildResult:
    source: Source
    ok: bool
    library: Path | None
    compile_s: float
    cached: bool
    key: str
    command: list[str] = field(default_factory=list)
    log: str = ""
    errors: list[str] = field(default_factory=list)
    #: the library's sha256 as this process built or adopted it ('' without a library)
    sha256: str = ""
    #: why a cached library was discarded and rebuilt ('' when it was not)
    integrity: str = ""


class IntegrityError(MaxcodeError):
    """A built library no longer hashes to what the trusted side recorded: it is never loaded."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}; it is not loaded (build it again: delete {path.parent})")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_artifact(path: Path, sha256: str) -> Path:
    """``path`` if it still hashes to ``sha256``; else :class:`IntegrityError` (one line, with the reason)."""
    if not sha256:
        raise IntegrityError(path, "no hash was recorded for this library")
    if path.is_symlink():
        raise IntegrityError(path, "is a symbolic link, not the library that was built")
    try:
        actual = file_sha256(path)
    except OSError as e:
        raise IntegrityError(path, f"cannot be read ({e.strerror or e})") from None
    if actual != sha256:
        raise IntegrityError(path, f"changed since it was built (sha256 {actual[:16]}, recorded {sha256[:16]})")
    return path


def verified_library(result: BuildResult) -> Path:
    """The library of a successful build, checked against the hash recorded when it was built.

    Call it right before the library is loaded (or handed to a worker that loads it).
    """
    if not result.ok or result.library is None:
        raise IntegrityError(Path(result.key or "?"), "the build has no library")
    return verify_artifact(result.library, result.sha256)


_SEALED: list[int] = []  # the sealed copies' descriptors stay open while their libraries are loaded


def sealed_memfd(data: bytes, name: str) -> int | None:
    """A write-sealed memory file holding ``data`` (None where the system has none)."""
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS"):
        return None
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except OSError:
        os.close(fd)
        return None
    return fd


def sealed_library(result: BuildResult) -> str:
    """A path to load the library from whose bytes are exactly those just verified.

    Between a check of the file and its ``dlopen`` anyone who can write the cache could swap
    it; so the verified bytes go into a sealed memory file (Linux ``memfd``, write-sealed:
    not even a process of the same user can change it) and that is what gets loaded. Where
    that is not possible, the verified path itself.
    """
    path = verified_library(result)
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != result.sha256:
        raise IntegrityError(path, "changed while it was being loaded")
    fd = sealed_memfd(data, f"maxcode-{result.sha256[:16]}.so")
    if fd is None:
        return str(path)
    _SEALED.append(fd)
    return f"/proc/self/fd/{fd}"


def build_id(result: BuildResult) -> str:
    """What a library hash recorded in a committed lock is valid for: this build key, in this
    cache folder, on this host. Builds are reproducible only there (``-march=native``, the
    source's path in the object); elsewhere the lock's hash does not apply and the local
    build record alone holds."""
    folder = str(result.library.parent.resolve()) if result.library is not None else ""
    return hashlib.sha256(f"{result.key}\0{folder}\0{platform.node()}".encode()).hexdigest()


@dataclass
class BuildRecord:
    """What the trusted side wrote when it adopted a build: the library's hash, and how it was built."""

    sha256: str
    compile_s: float
    command: list[str]

    @property
    def library_name(self) -> str:
        return f"lib-{self.sha256}.so"


def record_path(root: Path, key: str) -> Path:
    """The trusted record of build ``key``: next to its build folder, outside the compiler's reach."""
    return root / key[:2] / f"{key}.json"


def read_record(root: Path, key: str) -> BuildRecord | None:
    try:
        raw = json.loads(record_path(root, key).read_text())
        rec = BuildRecord(str(raw["sha256"]), float(raw.get("compile_s", 0.0)), [str(c) for c in raw.get("command", [])])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rec if re.fullmatch(r"[0-9a-f]{64}", rec.sha256) else None


def _write_record(root: Path, key: str, rec: BuildRecord) -> None:
    write_atomic(record_path(root, key), json.dumps({"sha256": rec.sha256, "compile_s": rec.compile_s, "command": rec.command}))


@functools.lru_cache(maxsize=None)
def compiler_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.lru_cache(maxsize=None)
def _header_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(INCLUDE_DIR.rglob("*.h")):
        h.update(p.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def cuda_arch() -> str:
    """The local GPU's architecture, or sm_90 where there is none (compile-only checks)."""
    try:
        # the compiler driver builds C++ (bench-ab's callgrind shim) without torch (~2 s to import);
        # only this GPU query needs it: deferred, it keeps start-up fast
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return "sm_90"


def compiler_for(lang: str) -> str:
    if lang == "cuda":
        return os.environ.get("MAXCODE_NVCC") or shutil.which("nvcc") or "nvcc"
    return os.environ.get("MAXCODE_CXX") or os.environ.get("CXX") or "g++"


def flags_for(lang: str, cxxflags: Sequence[str] | None, nvccflags: Sequence[str] | None) -> list[str]:
    if lang == "cuda":
        base = list(nvccflags) if nvccflags is not None else list(DEFAULT_NVCCFLAGS)
        return base + [f"-arch={cuda_arch()}", "-shared", "-Xcompiler", "-fPIC"]
    base = list(cxxflags) if cxxflags is not None else list(DEFAULT_CXXFLAGS)
    return base + ["-shared", "-fPIC"]


def cache_key(src: Source, exe: str, flags: Sequence[str]) -> str:
    h = hashlib.sha256()
    for part in (src.lang, src.text, exe, " ".join(flags), compiler_version(exe), _header_digest()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def trim_errors(log: str, shown_name: str, build_path: str) -> list[str]:
    """The first few compiler errors, with our cache path replaced by the candidate's name."""
    log = log.replace(build_path, shown_name)
    lines = log.splitlines()
    errors: list[str] = []
    for i, line in enumerate(lines):
        if re.search(r"\berror\b", line, re.IGNORECASE) and not line.startswith("compilation terminated"):
            block = [line.rstrip()]
            for nxt in lines[i + 1 : i + 4]:
                if re.search(r"\berror\b|^\S+:\d+", nxt) or not nxt.strip():
                    break
                block.append(nxt.rstrip())
            errors.append("\n".join(block))
            if len(errors) >= MAX_ERRORS:
                break
    if not errors and log.strip():
        errors = ["\n".join(lines[-8:])]
    return errors


def build_all(
    sources: Sequence[Source],
    cache_dir: Path,
    *,
    cxxflags: Sequence[str] | None = None,
    nvccflags: Sequence[str] | None = None,
    timeout: float = 300.0,
    jobs: int | None = None,
    isolation: Isolation | None = None,
    force: bool = False,
    max_bytes: int = BUILD_BYTES,
) -> list[BuildResult]:
    """Build every source, in parallel, reusing cached libraries; one result per source.

    With ``isolation`` the compilers run in that sandbox, where only the folders of this
    batch are writable: a candidate's ``#include`` cannot reach the user's credentials,
    nor its build anything outside its own folder (the trusted records are outside them).
    A cached library is reused only while it hashes to its record; ``force`` rebuilds anyway.
    In a sandbox, what the compilers write is capped at ``max_bytes`` in all; a batch stopped
    for it is built again one source at a time, so only the source that writes too much fails.

    Nine parameters because the seven after the first two are keyword-only options with
    defaults, and each caller (the oracle, the dispatcher, bench-ab, the tests) sets the one or
    two it needs.
    """
    root = cache_dir / "native"
    root.mkdir(parents=True, exist_ok=True)
    results: list[BuildResult] = []
    todo: dict[str, tuple[BuildResult, list[str], Path]] = {}
    for src in sources:
        res, d = _planned(src, root, cxxflags, nvccflags)
        results.append(res)
        if res.key in todo:
            continue
        rec = read_record(root, res.key)
        if rec is not None and not force and _reused(res, rec, d):
            continue
        _stage(res, d, rec)
        todo[res.key] = (res, res.command, d)
    if todo:
        _build_capped(todo, root, timeout, jobs, isolation, max_bytes)
    for r in results:
        first = todo[r.key][0] if r.key in todo else r
        if r is not first:
            r.ok, r.library, r.compile_s, r.log, r.errors = first.ok, first.library, first.compile_s, first.log, first.errors
            r.sha256, r.integrity, r.command = first.sha256, first.integrity, first.command
    return results


def _planned(src: Source, root: Path, cxxflags: Sequence[str] | None, nvccflags: Sequence[str] | None) -> tuple[BuildResult, Path]:
    """A source's result, not built yet (its cache key and command), and its build folder."""
    exe = compiler_for(src.lang)
    flags = flags_for(src.lang, cxxflags, nvccflags)
    key = cache_key(src, exe, flags)
    d = root / key[:2] / key
    src_path = d / _source_name(src.lang)
    # the compiler writes a private name; this process adopts it as lib-<sha256>.so
    out = d / f"build-{os.getpid()}-{uuid.uuid4().hex[:12]}.so"
    command = [exe, *flags, f"-I{INCLUDE_DIR}", str(src_path), "-o", str(out)]
    return BuildResult(src, False, None, 0.0, False, key, command), d


def _source_name(lang: str) -> str:
    return f"candidate{'.cu' if lang == 'cuda' else '.cpp'}"


def _reused(res: BuildResult, rec: BuildRecord, d: Path) -> bool:
    """Whether ``rec``'s cached library still hashes to the record (``res`` is then filled in from
    it); a library changed since is discarded (``res.integrity`` says why) and built again."""
    lib = d / rec.library_name
    try:
        verify_artifact(lib, rec.sha256)
    except IntegrityError as e:
        if lib.exists() or lib.is_symlink():  # a library merely gone (a cleaned cache) is no alarm
            res.integrity = f"the cached library was discarded and rebuilt: {e.reason}"
        return False
    res.ok, res.library, res.cached, res.sha256 = True, lib, True, rec.sha256
    res.compile_s, res.command = rec.compile_s, rec.command or res.command
    return True


def _stage(res: BuildResult, d: Path, rec: BuildRecord | None) -> None:
    """The build folder, made ready for the compiler: a real folder holding the source, without
    the library ``rec`` recorded (it did not verify, or ``force`` rebuilds it)."""
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        d.unlink()  # a folder swapped for a link would let the compiler write elsewhere
    d.mkdir(parents=True, exist_ok=True)
    if rec is not None:
        (d / rec.library_name).unlink(missing_ok=True)
    (d / _source_name(res.source.lang)).write_text(res.source.text)


def _build_capped(todo: dict[str, tuple[BuildResult, list[str], Path]], root: Path, timeout: float, jobs: int | None,
                  isolation: Isolation | None, max_bytes: int) -> None:
    """Build ``todo`` in one ninja run; if its compilers passed ``max_bytes``, the builds that
    did not finish are made again alone, so the one that writes too much is the one that fails."""
    overfilled = _run_ninja(todo, root, timeout, jobs, isolation, max_bytes)
    if overfilled is None:
        return
    unfinished = {key: entry for key, entry in todo.items() if not entry[0].ok}
    if len(todo) > 1:
        for key, entry in unfinished.items():
            _build_capped({key: entry}, root, timeout, jobs, isolation, max_bytes)
        return
    for res, _cmd, _d in unfinished.values():
        res.errors = [f"the build was stopped: its compiler {overfilled}"]


def _run_ninja(todo: dict[str, tuple[BuildResult, list[str], Path]], root: Path, timeout: float, jobs: int | None,
               isolation: Isolation | None, max_bytes: int) -> str | None:
    """One ninja run over ``todo``, adopting what it built; why the folder watch stopped it, if it did."""
    with tempfile.TemporaryDirectory(dir=root, prefix="batch-") as tmp:
        lines = [
            "rule build",
            # the output appears under its name only once the compiler exited cleanly
            f"  command = timeout -k 2 {int(timeout)} $cmd > $log 2>&1 && mv -f $part $out",
            "  description = build $out",
            "",
        ]
        for _res, command, d in todo.values():
            out = command[-1]
            cmd = command[:-1] + [out + ".part"]
            lines.append(f"build {_esc(out)}: build")
            lines.append(f"  cmd = {' '.join(shlex.quote(c) for c in cmd)}")
            lines.append(f"  part = {shlex.quote(out + '.part')}")
            lines.append(f"  log = {shlex.quote(str(d / 'build.log'))}")
            lines.append("")
        ninja_file = Path(tmp) / "build.ninja"
        ninja_file.write_text("\n".join(lines))
        ninja = shutil.which("ninja") or "ninja"
        n = jobs or os.cpu_count() or 2
        start = time.monotonic()
        overfilled = _run_sandboxed([ninja, "-f", str(ninja_file), "-k", "0", "-j", str(n)], Path(tmp), n,
                                    [d for _res, _cmd, d in todo.values()], [root, INCLUDE_DIR], isolation, max_bytes)
        wall = time.monotonic() - start
        durations = _ninja_durations(Path(tmp) / ".ninja_log")
    for res, command, d in todo.values():
        out = Path(command[-1])
        log_path = d / "build.log"
        res.log = log_path.read_text(errors="replace") if log_path.exists() else ""
        res.compile_s = durations.get(str(out), wall)
        Path(str(out) + ".part").unlink(missing_ok=True)
        if out.is_file() and not out.is_symlink():
            sha = file_sha256(out)
            lib = d / f"lib-{sha}.so"
            os.replace(out, lib)
            res.command = command[:-1] + [str(lib)]
            _write_record(root, res.key, BuildRecord(sha, res.compile_s, res.command))
            res.ok, res.library, res.sha256 = True, lib, sha
        else:
            out.unlink(missing_ok=True)
            shown = res.source.path.name
            if not res.log.strip():
                res.log = f"the build did not finish within {int(timeout)} s" if res.compile_s >= timeout else "the build failed"
            res.errors = trim_errors(res.log, shown, str(d / _source_name(res.source.lang)))
            if res.compile_s >= timeout - 1:
                res.errors.insert(0, f"the build did not finish within {int(timeout)} s")
    return overfilled


def _run_sandboxed(argv: list[str], job_dir: Path, jobs: int, writable: list[Path], readable: list[Path],
                   isolation: Isolation | None, max_bytes: int) -> str | None:
    """Run the build; in ``isolation`` with the environment scrubbed of secrets (``#include "/proc/self/environ"``)
    and what it writes capped at ``max_bytes``: why the watch stopped it, if it did. Seven
    parameters because each is one thing the sandbox is made of (its command, folders, size
    and kind) and the one caller has them separately."""
    env = dict(scrubbed_env(), TMPDIR=str(job_dir))
    if isolation is None:
        subprocess.run(argv, cwd=job_dir, capture_output=True, text=True, env=env)
        return None
    limits = Limits(memory=(2 * jobs + 1) << 30, pids=max(256, 8 * jobs + 64), file_size=1 << 30)
    box = prepare(argv, isolation, job_dir, limits, extra_writable=writable, readable=readable, view="toolchain")
    proc = subprocess.Popen(box.argv, cwd=job_dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    watch = FolderWatch([job_dir, *writable], max_bytes, proc.pid)
    try:
        proc.wait()
    finally:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        proc.wait()
        box.cleanup()
    return watch.stop()


def _esc(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_durations(log: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) >= 4:
            out[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000.0
    return out
