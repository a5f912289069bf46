"""The parent's side of the worker processes: a fork server per reference, and its jobs.

Each job runs in a fresh child forked from a warm zygote (see remote/_maxcode_worker.py).
The parent owns every limit that must hold even when the child misbehaves: wall-clock
deadlines, the process-group kill, the cap on captured output, the size of messages it
accepts. A zygote that dies is replaced on the next job.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from collections.abc import Callable
from typing import Any, Iterator

import torch

from ..native import callpath
from ..sandbox.disk import FolderWatch, empty
from ..sandbox.isolation import Isolation, Limits, Sandboxed, prepare
from ..sandbox.stop import SignalFreeze, descendants
from .protocol import Event, ProtocolError, load_ctl, validate
from ..sandbox.env import scrubbed_env

WORKER = Path(__file__).parent / "remote" / "_maxcode_worker.py"
OUTPUT_CAP = 64 * 1024


class WorkerSetupError(Exception):
    """The reference could not be loaded in a worker."""


class _ZygoteGone(WorkerSetupError):
    """The zygote was dead when a job was sent to it."""


class JobTimeout(Exception):
    pass


class ChildGone(Exception):
    """The child closed its channel: it exited or was killed."""


class WorkerFailed(Exception):
    """The worker reported an error event where another event was due."""

    def __init__(self, status: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class CappedReader(threading.Thread):
    """Drains a pipe, keeping the first ``cap`` bytes and counting the rest."""

    def __init__(self, fd: int, cap: int = OUTPUT_CAP) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.cap = cap
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                self.total += len(chunk)
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        except OSError:
            pass
        finally:
            os.close(self.fd)

    @property
    def overflowed(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return self.kept.decode(errors="replace")


def _nothing() -> None:
    """The thaw of a sandbox that is not running (or was never frozen)."""


def load_child_message(data: bytes) -> Event:
    """Child messages are torch.save bytes loaded with weights_only (data, never code),
    then validated against the protocol."""
    try:
        msg = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the bytes are, they are not an event
        raise ProtocolError(f"a message that does not load as data ({type(e).__name__})") from None
    return validate(msg)


@dataclass
class Job:
    """A running child: its channel, its captured output, its pid and its deadline."""

    zygote: "Zygote"
    job_id: int
    pid: int
    conn: Connection
    output: CappedReader
    deadline: float
    max_message: int
    exit_code: int | None = None
    leftovers: int = 0
    stage: str = "start"
    #: why the sandbox was killed for the files it wrote (``Limits.job_bytes``), if it was
    overfilled: str | None = None

    def send(self, name: str, **kwargs: Any) -> None:
        """A command or reply to the worker, ``(name, {keywords})``; one that died meanwhile (its own
        exit, a kill) is :class:`ChildGone`, judged as a crash like a death noticed while reading,
        not an error that ends the batch."""
        try:
            self.conn.send((name, kwargs))
        except OSError:  # BrokenPipeError, ConnectionResetError: the worker's end is closed
            raise ChildGone(self.stage) from None

    def recv(self, deadline: float | None = None) -> Event:
        end = self.deadline if deadline is None else deadline
        remaining = end - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise JobTimeout(self.stage)
        try:
            data = self.conn.recv_bytes(self.max_message)
        except (EOFError, OSError):
            raise ChildGone(self.stage) from None
        msg = load_child_message(data)
        if msg.name == "stage":
            self.stage = str(msg.kwargs["what"])
        return msg

    def messages(self) -> Iterator[Event]:
        while True:
            msg = self.recv()
            if msg.name != "stage":
                yield msg

    def event(self, timeout: float | None = None) -> Event:
        """The next event other than a progress note."""
        while True:
            msg = self.recv(None if timeout is None else time.monotonic() + timeout)
            if msg.name != "stage":
                return msg

    def expect(self, name: str, timeout: float | None = None) -> Event:
        """The next event, which must be ``name``: a worker's error is raised as WorkerFailed."""
        msg = self.event(timeout)
        if msg.name == name:
            return msg
        if msg.name == "error":
            raise WorkerFailed(str(msg.kwargs["status"]), str(msg.kwargs["message"]), str(msg.kwargs["detail"]))
        raise ProtocolError(f"'{msg.name}' where '{name}' was due")

    def kill(self) -> None:
        """Kill the child's process group; if it cannot be found from here, the whole sandbox."""
        self.zygote.freeze(False)  # a frozen process does not die until it runs again
        pid = self.zygote.host_pid(self.pid)
        if pid is None:
            self.zygote.kill_sandbox()
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass

    def finish(self) -> None:
        """Wait for the child's exit (killing it if needed) and collect its status."""
        if self.exit_code is not None:
            return
        try:
            self.conn.close()
        except OSError:
            pass
        code, leftovers = self.zygote._wait_exit(self.job_id, self, grace=2.0)
        self.exit_code, self.leftovers = code, leftovers
        self.output.join(timeout=2.0)
        self.overfilled = self.zygote.overfilled()
        if self.overfilled:
            self.zygote.close()
            self.zygote.wipe()  # the next candidate starts with an empty job folder, not blamed for these files
            return
        if leftovers and self.zygote.namespaced:
            # what it left may still run (a helper that keeps changing its pid outruns a
            # list-then-kill): end the sandbox; the next job starts a fresh one
            self.zygote.close()


@dataclass
class Zygote:
    """A warm fork server for one reference."""

    reference: dict
    cwd: Path
    env: dict[str, str] = field(default_factory=scrubbed_env)
    proc: subprocess.Popen | None = None
    ctl: socket.socket | None = None
    info: dict = field(default_factory=dict)
    inputs_path: str | None = None
    _next_id: int = 0
    _log: CappedReader | None = None
    _running: Job | None = None
    wrapper: list[str] = field(default_factory=list)  # e.g. valgrind for instruction counts
    #: the OS sandbox the worker runs in (None: none at all, for callers that predate it)
    isolation: Isolation | None = None
    #: the worker's private writable folder (its TMPDIR and caches); the rest is read-only
    job_dir: Path | None = None
    #: folders under /tmp the worker reads (the project, the build cache, the inputs)
    readable: list[Path] = field(default_factory=list)
    devices: list[Path] = field(default_factory=list)
    mounts: list[tuple[Path, Path]] = field(default_factory=list)  # (writable source, seen as), bwrap only
    limits: Limits = field(default_factory=Limits)
    #: hand the worker the compiled call path (native/callpath.py); without it, candidates are called through ctypes
    call_path: bool = True
    _box: Sandboxed | None = None
    _watch: FolderWatch | None = None
    _overfilled: str | None = None
    _signals: SignalFreeze | None = None
    #: empty the job folder and the sandbox's private /tmp and /dev/shm before another candidate's
    #: first job (the candidates' worker: what one candidate leaves there is not seen by the next)
    clear_between_jobs: bool = False

    @property
    def namespaced(self) -> bool:
        """Its pids are not ours: they must be translated before we signal them."""
        return self.isolation is not None and self.isolation.kind != "none"

    def start(self, timeout: float = 120.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process and send the setup; ``wait_ready`` collects the answer.

        Split so the caller can do its own slow work (importing torch) meanwhile.
        """
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log_r, log_w = os.pipe()
        env = dict(self.env)
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        env["MAXCODE_DISABLE"] = "1"  # a decorated reference inside a worker is always the reference
        # a candidate's torch.compile caches live in its job folder, emptied before the next
        # candidate: a precompiled header (150 MB, 4 s on the 2-core VM) would be built for
        # each candidate's first compile and pay for itself only over many
        env.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")
        # inside a PID namespace our pid means nothing: the worker then relies on its
        # parent-death signal and on this socket closing
        parent = 0 if self.namespaced else os.getpid()
        argv = [*self.wrapper, sys.executable, "-u", str(WORKER), str(child_sock.fileno()), str(parent)]
        if self.isolation is not None:
            job_dir = self.job_dir or self.cwd
            job_dir.mkdir(parents=True, exist_ok=True)
            for name, sub in (("TMPDIR", ""), ("TORCH_HOME", "torch"), ("XDG_CACHE_HOME", "cache"),
                              ("TORCH_EXTENSIONS_DIR", "torch_extensions"), ("CUDA_CACHE_PATH", "cuda-cache"),
                              ("TRITON_CACHE_DIR", "triton")):
                env[name] = str(job_dir / sub) if sub else str(job_dir)
            self._box = prepare(argv, self.isolation, job_dir, self.limits, readable=self.readable, devices=self.devices,
                                mounts=self.mounts)
            argv = self._box.argv
        self.proc = subprocess.Popen(
            argv,
            pass_fds=[child_sock.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log_w,
            stderr=log_w,
            env=env,
            cwd=str(self.cwd),
            start_new_session=True,
        )
        child_sock.close()
        os.close(log_w)
        self._overfilled = None
        if self._box is not None and self.job_dir is not None and self.limits.job_bytes:
            folders = [self.job_dir, *(src for src, _ in self.mounts if not src.is_relative_to(self.job_dir))]
            self._watch = FolderWatch(folders, self.limits.job_bytes, self.proc.pid)
        self._log = CappedReader(log_r)
        self._log.start()
        self.ctl = parent_sock
        # the compiled call path, as a sealed copy this process verified: the worker loads it
        # before any candidate exists (a descriptor, not a path a candidate could swap)
        try:
            helper = callpath.sealed_fd() if self.call_path else None
        except Warning:  # warnings turned into errors: the worker calls candidates through ctypes
            helper = None
        clear = []
        if self.clear_between_jobs and self.isolation is not None and self.isolation.kind != "none" and self.job_dir:
            clear = [str(self.job_dir), *self.isolation.private_scratch]
        self._send("setup", fds=[helper] if helper is not None else None, reference=self.reference, clear=clear)

    def wait_ready(self, timeout: float = 120.0) -> None:
        ev = self._expect("ready", timeout)
        self.info = dict(ev.kwargs)
        if self.inputs_path:
            self.load_inputs(self.inputs_path)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> None:
        if not self.alive:
            self.close()
            self.start()

    def load_inputs(self, path: str) -> None:
        self.inputs_path = path
        self._send("inputs", path=path)
        try:  # anything but "ok" closes the zygote: a late "ok" must not answer the next command
            self._expect("ok", 300.0)
        except WorkerSetupError as e:
            raise WorkerSetupError(f"the worker could not load {path}: {e}") from None

    def _send(self, name: str, *, fds: list[int] | None = None, **kwargs: Any) -> None:
        """A command to the zygote, JSON ``[name, {keywords}]``; ``fds`` travel with it (SCM_RIGHTS)."""
        assert self.ctl is not None
        data = json.dumps((name, kwargs)).encode()
        if fds:
            socket.send_fds(self.ctl, [data], fds)
        else:
            self.ctl.send(data)

    def _recv(self, timeout: float) -> Event:
        """The zygote's next control event, validated (a malformed one is :class:`ProtocolError`);
        ``timeout`` and ``dead`` are made here, never read off the socket."""
        assert self.ctl is not None
        self.ctl.settimeout(timeout)
        try:
            data = self.ctl.recv(1 << 16)
        except socket.timeout:
            return Event("timeout", {})
        except OSError:
            data = b""
        if not data:
            log = self._log.text()[-2000:] if self._log else ""
            return Event("dead", {"message": log.strip().splitlines()[-1] if log.strip() else "the worker exited"})
        return load_ctl(data)

    def _expect(self, name: str, timeout: float) -> Event:
        """The next control event, which must be ``name``; otherwise the zygote is closed and the
        reason (its setup error, its last line of output, the broken protocol) is a WorkerSetupError."""
        try:
            ev = self._recv(timeout)
        except ProtocolError as e:
            self.close()
            raise WorkerSetupError(f"the worker broke the control protocol: {e}") from None
        if ev.name != name:
            self.close()
            if "message" in ev.kwargs:  # setup_error, dead
                raise WorkerSetupError(str(ev.kwargs["message"]))
            why = f"no '{name}' within {timeout:.0f} s" if ev.name == "timeout" else f"'{ev.name}' where '{name}' was due"
            raise WorkerSetupError(why)
        return ev

    def spawn(self, job: dict, timeout: float, max_message: int) -> Job:
        """Fork a child for ``job``; it must finish within ``timeout`` seconds.

        A zygote that died since its last job is replaced once, here: a candidate can kill the
        process that forked it, and the sandbox around it outlives it by a moment, so it can
        still look alive when the next job is sent. No code of this job's candidate ran yet."""
        self.ensure()
        try:
            return self._fork(job, timeout, max_message)
        except _ZygoteGone:
            self.start()
            return self._fork(job, timeout, max_message)

    def _fork(self, job: dict, timeout: float, max_message: int) -> Job:
        self._next_id += 1
        job_id = self._next_id
        parent_chan, child_chan = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        try:
            self._send("fork", fds=[child_chan.fileno(), out_w], job_id=job_id, job=job)
            sent = True
        except OSError:  # its end of the socket is gone with it
            sent = False
        finally:
            child_chan.close()
            os.close(out_w)
        try:
            ev = self._recv(60.0) if sent else Event("dead", {})
            why = ev.name
            if why == "forked" and ev.kwargs["job_id"] != job_id:
                why = f"forked job {ev.kwargs['job_id']}, not {job_id}"
        except ProtocolError as e:
            why = str(e)
        if why != "forked":
            os.close(out_r)
            parent_chan.close()
            self.close()
            raise (_ZygoteGone if why == "dead" else WorkerSetupError)(f"the worker did not fork a job ({why})")
        reader = CappedReader(out_r)
        reader.start()
        conn = Connection(parent_chan.detach())
        handle = Job(self, job_id, int(ev.kwargs["pid"]), conn, reader, time.monotonic() + timeout, max_message)
        self._running = handle
        return handle

    def _wait_exit(self, job_id: int, job: Job, grace: float) -> tuple[int | None, int]:
        end = time.monotonic() + grace
        killed = False
        while True:
            try:
                ev = self._recv(max(0.05, end - time.monotonic()) if not killed else 30.0)
            except ProtocolError:  # a zygote that breaks the protocol is not waited on: judged like a dead one
                ev = Event("dead", {})
            if ev.name == "exited" and ev.kwargs["job_id"] == job_id:
                self._running = None
                return int(ev.kwargs["status"]), int(ev.kwargs["leftovers"])
            if ev.name == "dead":
                self.close()
                return None, 0
            if ev.name == "timeout":
                if killed:
                    self.close()
                    return None, 0
                job.kill()
                killed = True

    def host_pid(self, pid: int) -> int | None:
        """Our pid for the worker's ``pid`` (its own PID namespace's number), if it still runs."""
        if not self.namespaced:
            return pid
        if self.proc is None:
            return None
        for candidate in descendants(self.proc.pid):
            try:
                with open(f"/proc/{candidate}/status") as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            ids = line.split()[1:]
                            if len(ids) >= 2 and int(ids[1]) == pid:
                                return candidate
                            break
            except (OSError, ValueError):
                continue
        return None

    def freeze(self, frozen: bool) -> None:
        """Stop (or resume) every process of this sandbox: its freezer cgroup, else SIGSTOP/SIGCONT.

        The trusted side freezes the candidates' sandbox whenever it is not serving a timed
        call: nothing of it can run while the reference is timed or its outputs are read.
        """
        if self._box is not None and self._box.cgroups.freeze(frozen):
            return
        if self.proc is None:
            return
        if frozen:
            self._signal_freeze().stop()
        else:
            self._signal_freeze().resume()

    def thawer(self) -> Callable[[], None]:
        """Everything of a resume but its last step, done now; the call it returns makes the thaw.

        The trusted clock starts between the two (oracle/timing.py): a thaw wakes the sandbox's
        threads one by one, and one woken before the clock started could work untimed."""
        if self._signals is not None and self._signals.stopped:
            return self._signals.resumer()
        thaw = self._box.cgroups.thaw_call() if self._box is not None else None
        return thaw if thaw is not None else _nothing

    def freezer_state(self) -> tuple[str, bytes, bytes] | None:
        """The freezer cgroup's state file and its thaw and freeze values, when the sandbox is
        frozen through one (the keeper thaws it with a write of its own: oracle/keeper.py)."""
        if self._box is None or (self._signals is not None and self._signals.stopped):
            return None
        return self._box.cgroups.freezer_state()

    def _signal_freeze(self) -> SignalFreeze:
        assert self.proc is not None
        if self._signals is None or self._signals.root != self.proc.pid:
            self._signals = SignalFreeze(self.proc.pid)
        return self._signals

    def ran_while_frozen(self) -> str | None:
        """What of the sandbox ran while it was to be frozen since the last call (without a
        freezer cgroup, a stop by signals can be outrun, so it is checked: sandbox/stop.py)."""
        if self._signals is None:
            return None
        ran, self._signals.ran = self._signals.ran, None
        return ran

    def overfilled(self) -> str | None:
        """Why the watch on the job folder killed this sandbox since it started, if it did."""
        return self._watch.exceeded() if self._watch is not None else self._overfilled

    def wipe(self) -> None:
        """Empty the job folder (only one given as ``job_dir``: never the working folder), keeping
        the folders mounted from it."""
        if self.job_dir is None:
            return
        empty(self.job_dir)
        for src, _ in self.mounts:
            src.mkdir(parents=True, exist_ok=True)

    def kill_sandbox(self) -> None:
        """Kill the sandbox's root: its PID namespace, and every process in it, goes with it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        self.freeze(False)
        if self._running is not None:
            self._running.kill()
            self._running = None
        if self.ctl is not None:
            try:
                self._send("exit")
            except OSError:
                pass
            self.ctl.close()
            self.ctl = None
        if self.proc is not None:
            self.kill_sandbox()
            self.proc.wait()
            self.proc = None
        if self._box is not None:
            self._box.cleanup()
            self._box = None
        if self._watch is not None:
            self._overfilled = self._watch.stop()
            self._watch = None


