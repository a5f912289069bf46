"""Building native candidates: g++ / nvcc through one ninja file, cached by content hash.

The cache key covers the source, the flags, the compiler's version and the ABI header,
so a hit is always the same binary. Outputs are written under a temporary name and
renamed, so an interrupted build never leaves a half-written library in the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .isolation import Isolation

INCLUDE_DIR = Path(__file__).parent / "include"
DEFAULT_CXXFLAGS = ("-O3", "-march=native", "-fopenmp", "-std=c++17")
# valgrind cannot execute AVX-512; under --timer instructions native code targets AVX2
VALGRIND_CXXFLAGS = ("-O3", "-march=x86-64-v3", "-fopenmp", "-std=c++17")
DEFAULT_NVCCFLAGS = ("-O3", "-std=c++17")
MAX_ERRORS = 3


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
) -> list[BuildResult]:
    """Build every source, in parallel, reusing cached libraries; one result per source.

    With ``isolation`` the compilers run in that sandbox, where only the folders of this
    batch are writable: a candidate's ``#include`` cannot reach the user's credentials,
    nor its build anything outside its own folder.
    """
    root = cache_dir / "native"
    root.mkdir(parents=True, exist_ok=True)
    results: list[BuildResult] = []
    todo: dict[str, tuple[BuildResult, list[str], Path]] = {}
    for src in sources:
        exe = compiler_for(src.lang)
        flags = flags_for(src.lang, cxxflags, nvccflags)
        key = cache_key(src, exe, flags)
        d = root / key[:2] / key
        lib = d / "candidate.so"
        ext = ".cu" if src.lang == "cuda" else ".cpp"
        src_path = d / f"candidate{ext}"
        command = [exe, *flags, f"-I{INCLUDE_DIR}", str(src_path), "-o", str(lib)]
        res = BuildResult(src, False, None, 0.0, False, key, command)
        results.append(res)
        meta = d / "build.json"
        if lib.exists() and meta.exists():
            info = json.loads(meta.read_text())
            res.ok, res.library, res.cached, res.compile_s = True, lib, True, float(info.get("compile_s", 0.0))
            continue
        if key in todo:
            continue
        d.mkdir(parents=True, exist_ok=True)
        src_path.write_text(src.text)
        todo[key] = (res, command, d)
    if todo:
        _run_ninja(todo, root, timeout, jobs, isolation)
    for r in results:
        first = todo[r.key][0] if r.key in todo else r
        if r is not first:
            r.ok, r.library, r.compile_s, r.log, r.errors = first.ok, first.library, first.compile_s, first.log, first.errors
    return results


def _run_ninja(todo: dict[str, tuple[BuildResult, list[str], Path]], root: Path, timeout: float, jobs: int | None,
               isolation: Isolation | None = None) -> None:
    with tempfile.TemporaryDirectory(dir=root, prefix="batch-") as tmp:
        lines = [
            "rule build",
            # the library appears under its final name only once it is complete
            f"  command = timeout -k 2 {int(timeout)} $cmd > $log 2>&1 && mv -f $tmpout $out",
            "  description = build $out",
            "",
        ]
        for _res, command, d in todo.values():
            lib = d / "candidate.so"
            tmp_lib = d / f"candidate.so.tmp{os.getpid()}"
            cmd = command[:-1] + [str(tmp_lib)]
            lines.append(f"build {_esc(str(lib))}: build")
            lines.append(f"  cmd = {' '.join(shlex.quote(c) for c in cmd)}")
            lines.append(f"  tmpout = {shlex.quote(str(tmp_lib))}")
            lines.append(f"  log = {shlex.quote(str(d / 'build.log'))}")
            lines.append("")
        ninja_file = Path(tmp) / "build.ninja"
        ninja_file.write_text("\n".join(lines))
        ninja = shutil.which("ninja") or "ninja"
        n = jobs or os.cpu_count() or 2
        start = time.monotonic()
        _run_sandboxed([ninja, "-f", str(ninja_file), "-k", "0", "-j", str(n)], Path(tmp), n,
                       [d for _res, _cmd, d in todo.values()], [root, INCLUDE_DIR], isolation)
        wall = time.monotonic() - start
        durations = _ninja_durations(Path(tmp) / ".ninja_log")
    for res, command, d in todo.values():
        lib = d / "candidate.so"
        log_path = d / "build.log"
        res.log = log_path.read_text(errors="replace") if log_path.exists() else ""
        res.compile_s = durations.get(str(lib), wall)
        for stale in d.glob("candidate.so.tmp*"):
            stale.unlink(missing_ok=True)
        if lib.exists():
            res.ok, res.library = True, lib
            (d / "build.json").write_text(json.dumps({"compile_s": res.compile_s, "command": command}))
        else:
            shown = res.source.path.name
            if not res.log.strip():
                res.log = f"the build did not finish within {int(timeout)} s" if res.compile_s >= timeout else "the build failed"
            res.errors = trim_errors(res.log, shown, str(d / f"candidate{'.cu' if res.source.lang == 'cuda' else '.cpp'}"))
            if res.compile_s >= timeout - 1:
                res.errors.insert(0, f"the build did not finish within {int(timeout)} s")


def _run_sandboxed(argv: list[str], job_dir: Path, jobs: int, writable: list[Path], readable: list[Path],
                   isolation: Isolation | None) -> None:
    """Run the build; in ``isolation`` with the environment scrubbed of secrets (``#include "/proc/self/environ"``)."""
    from .isolation import Limits, prepare
    from .sandbox import scrubbed_env

    env = dict(scrubbed_env(), TMPDIR=str(job_dir))
    if isolation is None:
        subprocess.run(argv, cwd=job_dir, capture_output=True, text=True, env=env)
        return
    limits = Limits(memory=(2 * jobs + 1) << 30, pids=max(256, 8 * jobs + 64), file_size=1 << 30)
    box = prepare(argv, isolation, job_dir, limits, extra_writable=writable, readable=readable)
    proc = subprocess.Popen(box.argv, cwd=job_dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait()
    finally:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        proc.wait()
        box.cleanup()


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
