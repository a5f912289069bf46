"""Native programs: compile a C++ program once per source and flags (in a sandbox), run it on
test cases with its output judged, and count its instructions under callgrind.

The mechanics that the program oracle (``oracle/program.py``) and the PIE benchmark
(``bench/pie.py``) share, kept below both: the oracle must not import a benchmark. A test case
is PIE's public layout (``input.<k>.txt`` with its ``output.<k>.txt``); an output matches by
PIE's rule (lines equal, tokens equal, or numbers within 1e-3), which is also the program
oracle's.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MaxcodeError
from ..sandbox.disk import RunWatches, empty
from ..sandbox.env import scrubbed_env
from ..sandbox.isolation import Cgroups, Isolation, Limits, prepare
from ..sandbox.stop import kill_group

__all__ = [
    "Build",
    "COMPILE_TIMEOUT",
    "CXX",
    "OUTPUT_CAP",
    "Sandbox",
    "SuiteFailure",
    "TOLERANCE",
    "TestCase",
    "VALGRIND_SLOWDOWN",
    "compile_program",
    "count_instructions",
    "exit_reason",
    "first_difference",
    "first_error_line",
    "judged_run",
    "lines_match",
    "output_lines",
    "outputs_match",
    "parse_callgrind",
    "run_case",
    "run_program",
    "run_suite",
    "source_key",
    "tests_in",
    "tokens_match",
]

CXX = "g++"
TOLERANCE = 1e-3
OUTPUT_CAP = 16 << 20
COMPILE_TIMEOUT = 300.0
VALGRIND_SLOWDOWN = 50  # callgrind runs this many times slower than native: its time limit scales with it


def output_lines(text: str) -> list[str]:
    """Lines with trailing whitespace stripped and trailing empty lines dropped: judges ignore both."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _number(token: str) -> float | None:
    if "_" in token:  # float() accepts 1_000; a judge would not
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def tokens_match(actual: str, expected: str) -> bool:
    """Equal, or both numbers within PIE's absolute tolerance (so 0.3333 matches 0.333333)."""
    if actual == expected:
        return True
    a, b = _number(actual), _number(expected)
    return a is not None and b is not None and abs(a - b) < TOLERANCE


def lines_match(actual: str, expected: str) -> bool:
    """PIE's per-line rule, applied token by token so '1.5 2' matches '1.50001 2'."""
    if actual == expected:
        return True
    ta, tb = actual.split(), expected.split()
    return len(ta) == len(tb) and all(tokens_match(a, b) for a, b in zip(ta, tb))


def first_difference(actual: str, expected: str) -> str | None:
    """None when the outputs match by PIE's rule, else where they first differ (for the reason column)."""
    got, want = output_lines(actual), output_lines(expected)
    for i, (a, b) in enumerate(zip(got, want)):
        if not lines_match(a, b):
            return f"line {i + 1}: got {_clip(a)}, expected {_clip(b)}"
    if len(got) != len(want):
        return f"{len(got)} lines, expected {len(want)}"
    return None


def outputs_match(actual: str, expected: str) -> bool:
    return first_difference(actual, expected) is None


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def first_error_line(stderr: str, returncode: int) -> str:
    """The compiler's first error, which is the one that explains the others."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or "undefined reference" in line:
            return line
    return lines[0] if lines else f"{CXX} exited with status {returncode}"


def parse_callgrind(text: str) -> int:
    """Instructions executed, from a callgrind output file's summary (or totals) line."""
    for key in ("summary:", "totals:"):
        for line in text.splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    raise ValueError("no summary: or totals: line in the callgrind output")


@dataclass(frozen=True)
class TestCase:
    index: int
    input: Path
    expected: str


def tests_in(folder: Path, label: str) -> list[TestCase]:
    """PIE's public test layout: input.<k>.txt with its output.<k>.txt, in order of k."""
    indices = sorted(int(m.group(1)) for p in folder.glob("input.*.txt") if (m := re.fullmatch(r"input\.(\d+)\.txt", p.name)))
    if not indices:
        raise MaxcodeError(f"{label}: no test cases ({folder}/input.<k>.txt)")
    tests = []
    for k in indices:
        expected = folder / f"output.{k}.txt"
        if not expected.is_file():
            raise MaxcodeError(f"{label}: {folder}/input.{k}.txt has no output.{k}.txt")
        tests.append(TestCase(k, folder / f"input.{k}.txt", expected.read_text(encoding="utf-8", errors="replace")))
    return tests


@dataclass(frozen=True)
class Build:
    binary: Path | None
    error: str | None  # the compiler's first error line when it failed
    cached: bool


def source_key(code: str, flags: Sequence[str]) -> str:
    return hashlib.sha256("\0".join([CXX, *flags, code]).encode()).hexdigest()


def compile_program(code: str, flags: Sequence[str], cache: Path, isolation: Isolation | None = None) -> Build:
    """Compile once per (source, flags): a failure is cached too, it would fail the same way again.

    With ``isolation`` the compiler runs in that sandbox, only its temporary folder writable
    (an ``#include`` of a credential file or ``/proc/self/environ`` finds nothing).
    """
    key = source_key(code, flags)
    binary, error = cache / key, cache / f"{key}.err"
    if binary.is_file():
        return Build(binary, None, True)
    if error.is_file():
        return Build(None, error.read_text(), True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        (Path(tmp) / "prog.cpp").write_text(code, encoding="utf-8")
        argv = [CXX, *flags, "prog.cpp", "-o", "prog"]
        boxed = (prepare(argv, isolation, Path(tmp), Limits(memory=4 << 30, pids=256, file_size=1 << 30), view="toolchain")
                 if isolation else None)
        try:
            proc = subprocess.run(boxed.argv if boxed else argv, cwd=tmp, capture_output=True, start_new_session=boxed is not None,
                                  env={**scrubbed_env(), "LC_ALL": "C"}, text=True, errors="replace", timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Build(None, f"{CXX} took over {COMPILE_TIMEOUT:.0f}s", False)
        finally:
            if boxed is not None:
                boxed.cleanup()
        if proc.returncode != 0:
            message = first_error_line(proc.stderr, proc.returncode)
            (Path(tmp) / "err").write_text(message)
            os.replace(Path(tmp) / "err", error)
            return Build(None, message, False)
        os.replace(Path(tmp) / "prog", binary)
    return Build(binary, None, False)


#: the processes and threads a program run may have at once (a fork bomb stops here)
PROGRAM_PIDS = 256
#: what a run may write to its working folder, all files together: a judged program reads stdin
#: and writes stdout, and needs no files at all
PROGRAM_FILES = 256 << 20


class ProcessLimit:
    """The pids cgroups that cap a sandbox's program runs at ``pids`` processes and threads: one per
    thread that runs programs, made at its first run and joined by each later one (making one per
    run would cost tens of milliseconds), so runs in parallel threads do not share a limit and one
    fork bomb cannot starve the others."""

    def __init__(self, pids: int) -> None:
        self.pids = pids
        self._lock = threading.Lock()
        self._made: dict[int, Cgroups] = {}

    def for_this_thread(self) -> Cgroups:
        with self._lock:
            key = threading.get_ident()
            if key not in self._made:
                self._made[key] = Cgroups.make(Limits(memory=None, pids=self.pids))
            return self._made[key]

    def settle(self, cgroups: Cgroups, timeout: float = 2.0) -> None:
        """Wait until the killed run's processes are gone, so the next run gets the limit again (a
        task's count can outlive it by a second; that one is left)."""
        folder = cgroups.folders.get("pids")
        end = time.monotonic() + timeout
        while folder is not None and time.monotonic() < end:
            try:
                if not (folder / "cgroup.procs").read_text().strip():
                    return
            except OSError:
                return
            time.sleep(0.001)

    def cleanup(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for cgroups in made:
            cgroups.cleanup()


class SuiteFailure(Exception):
    """A program failed a test case; the message is the reason shown in the table."""


@dataclass(frozen=True)
class Sandbox:
    """What an untrusted program runs under: an environment, and resource limits set on its pid
    while the gate (see :data:`_GATE`) holds it, before the program is exec'd.

    With ``isolation`` each run starts in that OS sandbox instead, with ``os_limits`` (its
    working folder the only writable one); that costs milliseconds per run, outside the timed
    span. Under ``bwrap`` a run sees the compilers' view (the system's folders, the interpreter,
    PATH), its binary's folder and ``readable``, nothing of the project: a program needs its
    stdin, which it gets as an open file, and no other file, and the expected outputs sit beside
    the inputs. ``hidden``: folders covered where the view shows them (``unshare`` shows the
    whole filesystem otherwise), the test case's own folder always. ``process_limit``: the pids cgroups each run joins, so a fork bomb stops at
    :data:`PROGRAM_PIDS`.
    """

    env: dict[str, str] | None = None
    limits: Callable[[int], None] | None = None
    isolation: Isolation | None = None
    os_limits: Limits = Limits()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    process_limit: ProcessLimit | None = field(default=None, compare=False)
    #: the cap on what a run writes to its working folder, all files together (``os_limits.job_bytes``)
    watches: RunWatches | None = field(default=None, compare=False)


def program_sandbox(isolation: Isolation, cpu_seconds: int, memory: int | None, readable: Sequence[Path] = (),
                    hidden: Sequence[Path] = ()) -> Sandbox:
    """What a source or candidate program runs under: the OS sandbox in force with its limits,
    else (``none``) a scrubbed environment with limits set on the pid as it starts: memory
    (address space; None under valgrind, which reserves far more than it uses), CPU time, file
    size, no core dumps. ``hidden``: the folders that hold its expected outputs (see
    :class:`Sandbox`)."""
    env = dict(scrubbed_env(), LC_ALL="C")
    if isolation.kind != "none":
        process_limit = ProcessLimit(PROGRAM_PIDS)
        limits = Limits(memory=memory, pids=PROGRAM_PIDS, file_size=64 << 20, cpu_seconds=cpu_seconds, job_bytes=PROGRAM_FILES)
        watches = RunWatches(PROGRAM_FILES)
        box = Sandbox(env=env, isolation=isolation, readable=tuple(readable), hidden=tuple(hidden),
                      process_limit=process_limit, os_limits=limits, watches=watches)
        weakref.finalize(box, process_limit.cleanup)
        weakref.finalize(box, watches.close)
        return box

    def limits(pid: int) -> None:
        resource.prlimit(pid, resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
        if memory:
            resource.prlimit(pid, resource.RLIMIT_AS, (memory, memory))

    return Sandbox(env=env, limits=limits)


#: the last step before the program: say so on stderr, wait for the go on the same socket, then
#: let stderr go and exec. Runs inside the sandbox but before any candidate code, so the clock
#: (started by the trusted side on the ready line) leaves out the sandbox's setup: its
#: milliseconds of namespaces and mounts, noisier than many a program's run, are not the
#: program's time. The test case is stdin from the start (:func:`_sealed_copy`), and the
#: program keeps no descriptor but 0, 1 and 2 (dash takes only one-digit fds, hence stderr as
#: the channel).
_GATE = 'echo maxcode-ready >&2; read -r go <&2; exec 2>/dev/null; exec "$@"'
_READY = b"maxcode-ready\n"


def run_program(cmd: Sequence[str], stdin: Path, timeout: float, cwd: Path,
                sandbox: Sandbox | None = None, writable: Sequence[Path] = ()) -> tuple[str | None, str, float]:
    """Run with stdin from a file, stdout capped; returns (failure or None, stdout, wall seconds).

    The seconds run from the moment the sandbox is ready to exec the program to its exit.
    The program gets its own process group so a timeout kills whatever it started too. In an
    OS sandbox it runs in a folder of its thread's own under ``cwd``, watched (all its files
    together are capped) and emptied after each run; ``writable``: folders it may also write.
    It reads ``stdin`` through the descriptor it is given, never by its path, and the folder
    ``stdin`` is in is covered (:class:`Sandbox`).

    Six parameters and 64 lines because one run is one sequence (start the sandbox, aim the
    folder's watch, time, cap the output, empty the folder) that each caller (the judge, the
    search's cases, callgrind counts) needs whole; split, each part would pass the same handles.
    """
    box = sandbox or Sandbox()
    boxed = None
    limit = box.process_limit if box.isolation is not None else None
    cgroups = limit.for_this_thread() if limit is not None else None
    gated = ["/bin/sh", "-c", _GATE, "maxcode-gate", *cmd]
    if box.watches is not None:  # threads of one caller (PIE's jobs) share cwd: each its own folder
        cwd = cwd / f".maxcode-run-{threading.get_ident()}"
        cwd.mkdir(exist_ok=True)
    if box.isolation is not None:
        boxed = prepare(gated, box.isolation, cwd, box.os_limits, extra_writable=writable,
                        readable=[*box.readable, Path(cmd[-1]).parent], use_cgroups=False, cgroups=cgroups,
                        view="toolchain", hidden=[*box.hidden, Path(stdin).parent])
    refused = cgroups.pids_refused() if cgroups else 0
    setup_deadline = time.perf_counter() + timeout
    given = _sealed_copy(stdin)
    ours, theirs = socket.socketpair()  # the gate's channel: its ready line out, the go back
    try:
        proc = subprocess.Popen(boxed.argv if boxed else gated, stdin=given, stdout=subprocess.PIPE, stderr=theirs,
                                cwd=cwd, start_new_session=True, env=box.env)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
        os.close(given)
    overfilled = None
    try:
        if box.watches is not None:
            box.watches.aim(cwd, proc.pid)
        if box.limits is not None and boxed is None:
            try:
                box.limits(proc.pid)
            except (ProcessLookupError, PermissionError):  # it already exited
                pass
        failure, start = _await_ready(proc, ours, setup_deadline)
        if failure is None:
            failure, out = _collect(proc, start + timeout)
        else:
            out = b""
        seconds = time.perf_counter() - start
    finally:
        kill_group(proc)
        if proc.stdout:
            proc.stdout.close()
        ours.close()
        if box.watches is not None:
            overfilled = box.watches.disarm(cwd)
            empty(cwd)  # a judged program needs no files; the next run's cap starts from an empty folder
        if boxed is not None:
            boxed.cleanup()
        if limit is not None and cgroups is not None:
            limit.settle(cgroups)
    if overfilled is not None:  # killed for its files: whatever else it looked like
        failure = overfilled
    elif failure is None and proc.returncode:
        code = proc.returncode
        if boxed is not None and 128 < code < 128 + 65:  # the sandbox's init passes a signal on as 128 + its number
            code = 128 - code
        failure = exit_reason(code)
    if failure == "timeout":
        failure = f"timed out (> {timeout:g}s)"
    if failure is not None and cgroups and cgroups.pids_refused() > refused:
        failure += f" (it hit the sandbox's limit of {box.os_limits.pids} processes and threads)"
    return failure, out.decode("utf-8", errors="replace"), seconds


def _sealed_copy(path: Path) -> int:
    """A descriptor of ``path``'s bytes in a sealed in-memory file, at offset 0.

    What a program gets as stdin: no path in its sandbox leads to the test case or to the
    expected output beside it (its link reads ``/memfd:...``), and unlike the test case's own
    file, opened outside the sandbox's read-only view, it cannot be reopened for writing through
    ``/proc/self/fd/0`` and rewritten for the runs after it. A file still: programs may seek it
    or map it."""
    fd = os.memfd_create("maxcode-stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(path, "rb") as source:
            while chunk := source.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _await_ready(proc: subprocess.Popen[bytes], channel: socket.socket, deadline: float) -> tuple[str | None, float]:
    """(failure or None, the clock's start): wait for the gate's ready line, then let the program go."""
    ended, said = _read(channel.fileno(), deadline, until=_READY)
    if ended == "timeout":
        return "timeout", time.perf_counter()
    if ended != "found":  # the sandbox failed before the program could start
        try:
            proc.wait(max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            return "timeout", time.perf_counter()
        what = said.decode("utf-8", errors="replace").strip().splitlines()
        return f"the sandbox did not start it (exit status {proc.returncode}{': ' + what[-1][:200] if what else ''})", time.perf_counter()
    start = time.perf_counter()
    try:
        channel.sendall(b"go\n")
    except OSError:  # the gate is gone: the run's end says why
        pass
    return None, start


def exit_reason(returncode: int) -> str:
    """A judge's runtime error: a nonzero status, or the signal that killed the program."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[str | None, bytes]:
    """Read stdout until EOF and the exit, stopping at the deadline or the output cap."""
    assert proc.stdout is not None
    ended, out = _read(proc.stdout.fileno(), deadline)
    if ended == "timeout":
        return "timeout", b""
    if ended == "cap":
        return f"output over {OUTPUT_CAP >> 20} MiB", b""
    try:
        proc.wait(max(0.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        return "timeout", b""
    return None, out


def _read(fd: int, deadline: float, *, until: bytes | None = None) -> tuple[str, bytes]:
    """Read a pipe until ``until`` appears ("found"), its end ("eof"), the deadline ("timeout")
    or more than the output cap ("cap"); with what was read."""
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return "timeout", b"".join(chunks)
            if not sel.select(left):
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                return "eof", b"".join(chunks)
            chunks.append(data)
            size += len(data)
            if size > OUTPUT_CAP:
                return "cap", b""
            if until is not None and until in b"".join(chunks):
                return "found", b"".join(chunks)


def judged_run(cmd: Sequence[str], test: TestCase, timeout: float, cwd: Path, sandbox: Sandbox | None = None,
               writable: Sequence[Path] = ()) -> tuple[str | None, float]:
    """One run with its output compared by PIE's rule: (failure or None, wall seconds)."""
    failure, out, seconds = run_program(cmd, test.input, timeout, cwd, sandbox, writable)
    if failure is None and (diff := first_difference(out, test.expected)) is not None:
        failure = f"wrong output ({diff})"
    return failure, seconds


def run_case(cmd: Sequence[str], test: TestCase, timeout: float, cwd: Path, sandbox: Sandbox | None = None,
             writable: Sequence[Path] = ()) -> float:
    """One checked run: the wall seconds, or SuiteFailure naming the test case and what went wrong."""
    failure, seconds = judged_run(cmd, test, timeout, cwd, sandbox, writable)
    if failure:
        raise SuiteFailure(f"test {test.index}: {failure}")
    return seconds


def run_suite(binary: Path, tests: Sequence[TestCase], timeout: float, cwd: Path, sandbox: Sandbox | None = None) -> float:
    """Wall seconds of the whole test suite, every output checked (a timed run must be a correct one)."""
    return sum(run_case([str(binary)], t, timeout, cwd, sandbox) for t in tests)


def count_instructions(binary: Path, tests: Sequence[TestCase], timeout: float, cwd: Path, sandbox: Sandbox | None = None) -> int:
    """Instructions over the whole test suite under callgrind: deterministic, so one run suffices."""
    total = 0
    with tempfile.TemporaryDirectory(dir=cwd) as tmp:
        for t in tests:
            out = Path(tmp) / f"callgrind.{t.index}.out"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary)]
            run_case(cmd, t, timeout * VALGRIND_SLOWDOWN, cwd, sandbox, writable=(Path(tmp),))
            try:
                total += parse_callgrind(out.read_text())
            except (OSError, ValueError) as e:
                raise SuiteFailure(f"test {t.index}: callgrind gave no count ({e})") from None
    return total
