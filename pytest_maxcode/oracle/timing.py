"""The trusted clock: this process times calls that the sandboxed processes serve.

Nothing the verdict depends on is measured in a process that loaded candidate code
(DESIGN.md section 5.0). Each round, the reference process writes fresh inputs; the
candidate gets a copy while it is frozen; each side is armed, the doorbell rung with a
random token, and the clock stopped here once that token comes back and the outputs have
been read (inside the interval: what is not written when the call returns does not count).
The reference is served the same way, so the call overhead is the same on both sides.
Every timed output is compared with the reference's output for the same inputs; the
candidate's inputs must come back bit for bit, and its outputs must not change after
the clock stopped.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.reduction import send_handle
from typing import Any, Protocol

import torch

from ..model.strenum import PlainStrEnum
from ..native import callpath
from . import keeper as keeper_mod
from . import stats
from .compare import Mismatch, compare
from .pool import ChildGone, Job, JobTimeout, WorkerFailed
from .protocol import ProtocolError
from .remote import _maxcode_shm as shm

#: outputs up to this size are written by a native candidate straight into its shared slots
DIRECT_OUT_BYTES = 32 << 20
#: output words read inside each timed interval, at places chosen afresh every round
PROBE_WORDS = 256
#: probes of up to this many words are read through a memoryview (a fraction of a µs inside the
#: interval, where torch's indexing costs about 1.5 µs): small calls are the ones it weighs on
SMALL_PROBE = 32
#: rounds below which no verdict is "faster": a bootstrap over fewer blocks is overconfident
FASTER_ROUNDS = 30
#: seconds a candidate that may be faster is timed for at least, to reach FASTER_ROUNDS
EXTEND_S = 2.0
#: bytes of call slots per side; fewer slots for larger calls (at least one)
SLOT_BYTES = 256 << 20
MAX_SLOTS = 64
_NOW = time.perf_counter_ns
#: the timer polls for a call's answer this many times the expected sample before it sleeps
SPIN_FACTOR = 4.0
#: a sample is disturbed when the server or the timer waited runnable for a CPU during it for
#: longer than this (ns), or than DISTURBED_SHARE of the sample: other work had the core
DISTURBED_NS = 20_000
DISTURBED_SHARE = 0.02
#: what a thawed server may wait for its core besides DISTURBED_NS (ns): the wake-up of an
#: idle core (about 30 µs on the 2-core VM, 150 µs at the 90th percentile beside other work)
THAW_NS = 80_000


class Freeze(Protocol):
    """Stops and resumes the candidate's sandbox (the oracle's ``Zygote``)."""

    def freeze(self, frozen: bool) -> None:
        """Stop, or resume, the whole sandbox, and wait for it (untimed)."""

    def thawer(self) -> Callable[[], None]:
        """Everything of a resume but its last step, done now; the call returned makes the thaw
        (the clock starts between the two)."""

    def freezer_state(self) -> tuple[str, bytes, bytes] | None:
        """The freezer cgroup's state file and its thaw and freeze values (for the keeper); None
        when the sandbox is not frozen through one."""


@dataclass(frozen=True)
class Cores:
    """The trusted timer's core and the cores the serving processes are kept on.

    A server woken by the timer's doorbell may be queued on the timer's own core (the waker's),
    where the two spinning threads then take turns inside the measurement: on two cores that set
    most rounds aside and moved a 50x kernel's blocks between 27x and 63x. Kept apart, neither
    waits for the other. With one core there is nothing to split (``timer`` is None).
    """

    timer: int | None
    servers: tuple[int, ...]

    @classmethod
    def split(cls) -> Cores:
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            return cls(None, tuple(allowed))
        return cls(allowed[-1], tuple(allowed[:-1]))

    @property
    def spec(self) -> str:
        """The servers' cores as the worker reads them (``MAXCODE_SERVER_CPUS``); empty: unpinned."""
        return ",".join(map(str, self.servers)) if self.timer is not None else ""

    @contextmanager
    def timing(self) -> Iterator[None]:
        """The calling thread on the timer's core while it times, then back where it was."""
        with _on(None if self.timer is None else {self.timer}):
            yield

    @contextmanager
    def staging(self) -> Iterator[None]:
        """The calling thread on the servers' cores while it writes a side's inputs and
        poisons its outputs: written from the timer's core, they sat in that core's cache and
        every call fetched them across, at a cost that moved with the host (likely where it had
        put the two vCPUs): on the 2-core VM about one run in twenty measured the chain at 2x
        where the rest measured 3x. Written from the servers' core, 35 runs alternating with 35
        the old way spread 0.043 against 0.065 (sd of the log speedup), with no such run; and the
        inputs are where a caller's own thread would have left them."""
        with _on(set(self.servers) if self.timer is not None else None):
            yield


@contextmanager
def _on(cpus: set[int] | None) -> Iterator[None]:
    """The calling thread on ``cpus`` (None: where it is), then back where it was."""
    if cpus is None:
        yield
        return
    me = threading.get_native_id()
    before: set[int] | None = os.sched_getaffinity(me)
    try:
        os.sched_setaffinity(me, cpus)
    except OSError:
        before = None
    try:
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(me, before)


class RunDelay:
    """Nanoseconds some threads spent runnable but not running, summed (``/proc/.../schedstat``,
    second field): a sample during which the timer or the server waited for a CPU measured the
    machine's other work, not the call, and is set aside. Read from this process, so nothing a
    candidate does moves it; without schedstat it reads 0 and nothing is set aside."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.fds: list[int] = []
        paths = [f"/proc/self/task/{threading.get_native_id()}/schedstat"]
        for pid in pids:
            try:
                paths += [f"/proc/{pid}/task/{tid}/schedstat" for tid in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
        for path in paths:
            try:
                self.fds.append(os.open(path, os.O_RDONLY))
            except OSError:
                continue

    def __call__(self) -> int:
        total = 0
        for fd in self.fds:
            try:
                total += int(os.pread(fd, 128, 0).split()[1])
            except (OSError, IndexError, ValueError):
                continue
        return total

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class ReferenceFailed(Exception):
    """The reference's serving process failed (trusted side: not the candidate's fault)."""


@contextmanager
def _side(name: str) -> Iterator[None]:
    """Failures of the reference are the reference's; the candidate's keep their kind."""
    try:
        yield
    except WorkerFailed as e:
        if name == "reference":
            raise ReferenceFailed(str(e)) from None
        raise TimingRejected(e.status, str(e)) from None
    except JobTimeout:
        # the run's time limit, shared by both sides: whichever side it ran out on, the run did
        # not finish in time (a large workload's correctness sets can take most of it)
        raise
    except (ChildGone, ProtocolError) as e:
        if name == "reference":
            raise ReferenceFailed(f"{type(e).__name__}: {e}") from None
        raise


class TimingRejected(Exception):
    """The candidate did something during timing that makes its result not count."""

    def __init__(self, status: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.details = details or {}


@dataclass
class TimingConfig:
    time_budget: float
    min_rounds: int
    max_rounds: int
    min_speedup: float
    atol: float | None
    rtol: float | None
    inplace: bool = False
    warmup_s: float = 0.05
    #: seconds of calls per sample: long enough that a wake-up (tens of microseconds on a VM) is noise
    sample_s: float = 5e-4
    device: str = "cpu"
    #: a native (ABI) candidate, which can write into its slots; compat candidates return tensors
    native: bool = True
    #: where the timer runs (the servers were started on the other cores)
    cores: Cores = Cores(None, ())


@dataclass(frozen=True)
class TimedWorkload:
    """What one timing is of: a workload's call layout, and where its timed inputs come from."""

    name: str
    in_meta: list
    #: each output's (shape, dtype)
    out_meta: list
    #: captured input sets to draw from where the reference's generator cannot make fresh ones
    pool_size: int
    #: whether the reference's worker can generate fresh inputs for every timed call
    fresh: bool


class Disturbed(PlainStrEnum):
    """What became of a workload's disturbed rounds."""

    #: left out of the samples: enough undisturbed rounds came
    SET_ASIDE = "set_aside"
    #: counted: too few rounds fitted in the time allowed at all, each round being long
    LONG_ROUNDS = "long_rounds"
    #: counted: other work had the CPU so often that too few undisturbed rounds came
    TOO_BUSY = "too_busy"
    #: counted: the candidate's server was kept waiting far more often than the reference's,
    #: for the time each was timed: by its own threads, not by other work
    OWN = "own"


@dataclass
class WorkloadTiming:
    """Samples in ns per ``calls_per_sample`` calls, taken by this process."""

    reference_ns: list[int]
    candidate_ns: list[int]
    calls_per_sample: int
    checked_calls: int = 0
    notes: list[str] = field(default_factory=list)
    #: rounds set aside because a side or the timer waited for a CPU during them
    disturbed: int = 0
    #: whether those rounds are in the samples all the same, and why
    counted: Disturbed = Disturbed.SET_ASIDE
    #: µs a dispatched call of this workload costs besides its kernel (allocation, descriptors,
    #: the call), measured here with a no-op kernel through the path the worker used; None
    #: for compat candidates, or without the compiled call path
    call_overhead_us: float | None = None
    #: which call path that is: "compiled", or "ctypes: why"
    call_path: str = ""


class _Side:
    """One serving process (reference or candidate) behind its region and doorbell."""

    def __init__(self, name: str, job: Job, region: shm.Region, deadline: Callable[[], float]) -> None:
        self.name = name
        self.job = job
        self.region = region
        self.deadline = deadline
        self.round = 0
        self.delay = RunDelay([])
        #: whether the last timed call was disturbed (see RunDelay)
        self.disturbed = False
        self._view: memoryview | None = None  # the region as int64 words, for small probes
        #: the clock's reading at the start of the last timed call (ns)
        self.started = 0
        #: the serving process's pid here (after :meth:`watch`), and whether its thaws may go
        #: through a keeper (oracle/keeper.py: with a core of the timer's own)
        self.host: int | None = None
        self.keep = False

    def words(self) -> memoryview:
        if self._view is None:
            self._view = memoryview(self.region.map).cast("q")
        return self._view

    def close(self) -> None:
        """Release what holds the region's mapping (before it is closed)."""
        self.delay.close()
        if self._view is not None:
            self._view.release()
            self._view = None

    def watch(self) -> None:
        """Start (or refresh: threads appear on first use) the run-delay accounting of this
        side's serving process and of the timer's thread."""
        self.delay.close()
        self.host = host = self.job.zygote.host_pid(self.job.pid)
        self.delay = RunDelay([host] if host else [])

    def timed(self, n: int, part: str, spin_s: float, probe: torch.Tensor, stage: Callable[[], None],
              freeze: Freeze | None = None) -> tuple[int, torch.Tensor | list[int]]:
        """Write the inputs (``stage``), arm, ring, wait for the token, read the outputs at
        ``probe``: ns from ring to read, and what was read.

        With ``freeze`` (the candidate's side) the server is armed before its inputs exist,
        frozen while they are written, and thawed after the clock has started: a server that
        armed after its inputs were written could compute them for as long as it liked before
        it armed, untimed, and a thaw wakes the sandbox's threads one by one (680 µs for 200
        threads under cgroup v2), so the first one woken could start on its inputs before a
        clock read after the thaw. What the thaw costs is in its interval, against it."""
        with _side(self.name):
            if freeze is None:
                stage()
                self._arm(n)
                return self._ring(n, part, spin_s, probe, None)
            self._arm(n)
            freeze.freeze(True)
            start = self._thaw(freeze)
            answered = False
            try:
                stage()
                out = self._ring(n, part, spin_s, probe, start)
                answered = True
                return out
            finally:
                start.finish(answered)

    def _thaw(self, freeze: Freeze) -> keeper_mod.Thaw:
        """How this round's thaw is made: by the keeper of the server's core where there is one."""
        state = freeze.freezer_state() if self.keep and self.host else None
        cpu = keeper_mod.last_cpu(self.host) if state is not None and self.host else None
        if state is None or cpu is None:
            return keeper_mod.Thaw(freeze.thawer)
        return keeper_mod.keeper(cpu).thaw_by(state, freeze.thawer)

    def _arm(self, n: int) -> None:
        ctl = self.region.ctl
        ctl[shm.DOORBELL] = 0
        ctl[shm.DONE] = 0
        ctl[shm.FAILED] = 0
        ctl[shm.READY] = 0
        self.round += 1
        rnd = self.round
        self.job.send("round", n=n, rid=rnd)
        self._wait(shm.ARMED, lambda: ctl[shm.ARMED] == rnd, spin_s=shm.SPIN_S)

    def _ring(self, n: int, part: str, spin_s: float, probe: torch.Tensor,
              start: keeper_mod.Thaw | None) -> tuple[int, torch.Tensor | list[int]]:
        region = self.region
        ctl, base = region.ctl, region.base
        token = secrets.randbits(63) | 1
        words = _words(region.span(part, n))
        small = view = None
        if 0 < probe.numel() <= SMALL_PROBE and words.numel():
            view = self.words()
            first = region.layout["bounds"][part][0] // 8
            small = [first + i for i in probe.tolist()]
        d0 = self.delay()
        if start is not None:
            # rung while it is frozen (it sees the bell when thawed); the clock starts, then the thaw
            ctl[shm.DOORBELL] = token
            shm.notify(ctl, base, shm.DOORBELL)
            t0 = start()
        else:
            t0 = _NOW()
            ctl[shm.DOORBELL] = token
            shm.notify(ctl, base, shm.DOORBELL)
        self.started = t0
        # spinning, not sleeping: a wake-up inside the interval would cost a time slice on a
        # loaded machine (the servers leave this process a core of its own)
        self._wait(shm.DONE, lambda: ctl[shm.DONE] == token, spin_s=spin_s)
        # read inside the interval: words at places the server cannot know, compared after the
        # round with what is there then (work finished after answering shows as a change)
        seen = [view[i] for i in small] if small is not None else words[probe] if words.numel() else words
        t1 = _NOW()
        waited = self.delay() - d0
        # a thawed server first waits for its core to wake (tens of µs on a VM): that is not
        # other work taking the core
        allowed = DISTURBED_NS + (THAW_NS if start is not None else 0)
        self.disturbed = waited > max(allowed, DISTURBED_SHARE * (t1 - t0))
        if ctl[shm.FAILED]:
            self._failed()
        self._wait(shm.READY, lambda: ctl[shm.READY] == self.round, spin_s=shm.SPIN_S)
        return t1 - t0, seen

    def _wait(self, word: int, ready: Callable[[], bool], spin_s: float) -> None:
        def check() -> None:
            if time.monotonic() > self.deadline():
                raise JobTimeout(f"a timed call ({self.name})")
            if self.job.conn.poll(0):
                self._failed()

        while not shm.wait(self.region.ctl, self.region.base, word, ready, spin_s=spin_s, timeout_s=1.0, check=check):
            check()

    def _failed(self) -> None:
        """The server stopped serving: its next event says why (or it is gone)."""
        ev = self.job.event(timeout=5.0)
        if ev.name == "error":
            raise TimingRejected(str(ev.kwargs["status"]), str(ev.kwargs["message"]))
        raise TimingRejected("rejected", f"the {self.name} sent '{ev.name}' during a timed call (protocol)")


def _map(side: _Side, fd: int, direct: bool) -> bool:
    """Hand a side its slots; whether its server page-locked them (on a GPU)."""
    with _side(side.name):
        side.job.send("map", layout=side.region.layout, direct=direct)
        send_handle(side.job.conn, fd, 0)
        return bool(side.job.expect("mapped").kwargs["pinned"])


def _pinning_note(reference: bool, candidate: bool) -> list[str]:
    """On a GPU both sides' results reach the host inside the interval: a side whose slots could
    not be page-locked copies about three times slower, and the speedup leans against it."""
    if reference == candidate:
        return []
    slow, effect = ("candidate", "understated") if reference else ("reference", "overstated")
    return [f"the {slow}'s result slots could not be page-locked: its copy to the host is slower, so this speedup "
            f"is {effect}"]


def _slot_bytes(meta: Sequence[Any]) -> int:
    n = 0
    for m in meta:
        if m[0] == "t":
            _, shape, stride, dtype = m
            n += shm._nbytes(shape, stride, torch.empty((), dtype=getattr(torch, dtype)).element_size()) + shm.ALIGN
    return n


def time_workload(w: TimedWorkload, ref_job: Job, cand_job: Job, freeze: Freeze, cfg: TimingConfig,
                  deadline: Callable[[], float]) -> WorkloadTiming:
    """Interleaved timing of one workload; raises TimingRejected for a result that must not count.
    ``freeze`` stops and resumes the candidate's sandbox."""
    in_meta, out_meta = w.in_meta, w.out_meta
    outs = [("t", list(s), list(torch.empty(s).stride()), d) for s, d in out_meta]
    per_slot = _slot_bytes(in_meta) * 2 + _slot_bytes(outs)
    k_max = max(1, min(MAX_SLOTS, SLOT_BYTES // max(per_slot, 1)))
    lay_r = shm.layout(in_meta, out_meta, k_max, stage=True)
    lay_c = shm.layout(in_meta, out_meta, k_max)
    fds = [shm.create(lay_r["size"], "maxcode-reference"), shm.create(lay_c["size"], "maxcode-candidate")]
    regions: list[shm.Region] = []
    threads = torch.get_num_threads()
    # this process's own tensor work (copies, comparisons) on one thread: waking an idle
    # OpenMP team costs a time slice per operation on a loaded machine
    torch.set_num_threads(1)
    try:
        regions = [shm.Region(fds[0], lay_r), shm.Region(fds[1], lay_c)]
        ref = _Side("reference", ref_job, regions[0], deadline)
        cand = _Side("candidate", cand_job, regions[1], deadline)
        # a native candidate on the CPU writes its outputs straight into its slots (up to
        # DIRECT_OUT_BYTES; larger outputs are allocated afresh each call, as the dispatcher's
        # callers pay); else both sides copy their results inside the interval
        direct = cfg.native and cfg.device == "cpu" and _slot_bytes(outs) <= DIRECT_OUT_BYTES
        cand.keep = cfg.cores.timer is not None
        cand.watch()  # its serving process's pid, for the keeper (watched again once warm)
        pinned = _map(ref, fds[0], direct)
        freeze.freeze(False)
        pinned_cand = _map(cand, fds[1], direct)
        freeze.freeze(True)
        rounds = _Rounds(w, ref, cand, freeze, cfg)
        try:
            with cfg.cores.timing():
                result = rounds.run()
                result.notes += _pinning_note(pinned, pinned_cand)
                if cfg.native:
                    result.call_path = str(cand_job.zygote.info.get("call_path", ""))
                    if result.call_path == "compiled":
                        result.call_overhead_us = call_overhead_us(in_meta, out_meta, cfg.device)
            return result
        finally:
            ref.close()
            cand.close()
            if rounds.pending:  # a round that ended early leaves the next inputs' answer unread
                try:
                    rounds._drain()
                except (ReferenceFailed, TimingRejected):
                    ref_job.kill()  # replaced before the next candidate (its exit code is set)
                    ref_job.finish()
    finally:
        torch.set_num_threads(threads)
        for fd in fds:
            os.close(fd)
        for region in regions:
            region.close()


class _Rounds:
    def __init__(self, w: TimedWorkload, ref: _Side, cand: _Side, freeze: Freeze, cfg: TimingConfig) -> None:
        self.name, self.ref, self.cand, self.freeze, self.cfg = w.name, ref, cand, freeze, cfg
        self.pool_size, self.fresh = w.pool_size, w.fresh
        self.part = "in" if cfg.inplace else "out"
        self.rng = secrets.SystemRandom()
        self.gen = torch.Generator().manual_seed(secrets.randbits(63))
        self.checked = 0
        self.all_fresh = True
        self.spin_s = 0.01
        self.slots = ref.region.layout["slots"]
        self.buffer = 1  # the staging area of the round in hand (0 or 1); the next goes to the other
        self.pending = 0  # slots requested from the reference's worker and not yet collected

    def run(self) -> WorkloadTiming:
        cfg = self.cfg
        warm_end = time.monotonic() + cfg.warmup_s
        t_ref: list[int] = []
        t_cand: list[int] = []
        n = 0
        self._request(1)
        while n < 5 or (time.monotonic() < warm_end and n < 100):
            r, c = self.round(1, first_ref=n % 2 == 0, next_n=1)
            t_ref.append(r)
            t_cand.append(c)
            n += 1
        per_call = max(min(min(t_ref), min(t_cand)), 1) / 1e9
        k = int(min(self.ref.region.layout["slots"], max(1, math.ceil(cfg.sample_s / per_call))))
        self.spin_s = min(0.05, max(shm.SPIN_S, SPIN_FACTOR * k * per_call))
        self._drain()
        self._request(k)
        for side in (self.ref, self.cand):
            side.watch()
        samples: dict[str, list[int]] = {"ref": [], "cand": []}
        set_aside: dict[str, list[int]] = {"ref": [], "cand": []}
        alone = {"ref": 0, "cand": 0}  # rounds in which only that side was disturbed
        start = time.monotonic()
        budget_end = start + cfg.time_budget
        r = 0
        while r < cfg.max_rounds:
            if r >= cfg.min_rounds and time.monotonic() >= budget_end:
                # a "faster" needs FASTER_ROUNDS rounds: a candidate that may be faster gets them,
                # within three budgets (at least EXTEND_S); a clearly slower one stops here
                if r >= FASTER_ROUNDS or time.monotonic() >= start + max(3 * cfg.time_budget, EXTEND_S):
                    break
                if stats.median_ratio(samples["ref"], samples["cand"]) < cfg.min_speedup:
                    break
            if r >= max(cfg.min_rounds, 20) and r % 8 == 0 and stats.decided(samples["ref"], samples["cand"], cfg.min_speedup):
                break
            if r < cfg.min_rounds and time.monotonic() >= start + max(3 * cfg.time_budget, EXTEND_S) + 2 * cfg.time_budget:
                break  # too busy to get the rounds undisturbed: the disturbed ones fill in below
            a, b = self.round(k, first_ref=(r + len(set_aside["ref"])) % 2 == 0, next_n=k)
            kept = set_aside if self.ref.disturbed or self.cand.disturbed else samples
            if self.ref.disturbed != self.cand.disturbed:
                alone["ref" if self.ref.disturbed else "cand"] += 1
            kept["ref"].append(a)
            kept["cand"].append(b)
            r += kept is samples
        self._drain()
        notes = [] if self.all_fresh else ["timed on the pooled input sets: the reference's input generator did not fit"]
        disturbed = len(set_aside["ref"])
        round_notes, counted = rounds_notes(r, disturbed, cfg.min_rounds)
        cand_ns = sum(samples["cand"]) + sum(set_aside["cand"])
        share = cand_ns / max(1, cand_ns + sum(samples["ref"]) + sum(set_aside["ref"]))
        if own_disturbance(alone["cand"], alone["ref"], share):
            round_notes = [f"the candidate's server was kept waiting alone in {alone['cand']} rounds, the reference's in "
                           f"{alone['ref']}, for {share:.0%} of the time timed: its own threads held its core, so every "
                           f"round counts"]
            counted = Disturbed.OWN
        notes += round_notes
        if counted != Disturbed.SET_ASIDE:
            samples = {k2: samples[k2] + set_aside[k2] for k2 in samples}
        return WorkloadTiming(samples["ref"], samples["cand"], k, self.checked, notes, disturbed, counted)

    def _plan(self, n: int) -> list[tuple[str, int]]:
        if self.fresh:
            return [("fresh", self.rng.getrandbits(31)) for _ in range(n)]
        return [("pool", self.rng.randrange(self.pool_size)) for _ in range(n)]

    def _request(self, n: int) -> None:
        """Ask the reference's worker for the next round's inputs, in the other staging area."""
        self.buffer = 1 - self.buffer
        with _side("reference"):
            self.ref.job.send("stage", workload=self.name, plan=self._plan(n), first=self.buffer * self.slots)
        self.pending = n

    def _drain(self) -> None:
        if self.pending:
            with _side("reference"):
                self.ref.job.expect("staged")
            self.pending = 0

    def round(self, n: int, first_ref: bool, next_n: int) -> tuple[int, int]:
        ref, cand = self.ref, self.cand
        assert self.pending == n
        with _side("reference"):
            ev = ref.job.expect("staged")
        self.pending = 0
        self.all_fresh = self.all_fresh and bool(ev.kwargs.get("fresh"))
        first = self.buffer * self.slots
        staged = ref.region.span("stage", n, first)
        times = {}
        nwords = _words(cand.region.span(self.part, n)).numel()
        probe = torch.randint(0, max(nwords, 1), (min(PROBE_WORDS, nwords),), generator=self.gen)
        seen = None
        for who in (("ref", "cand") if first_ref else ("cand", "ref")):
            # each side's inputs are written, and its outputs poisoned, right before its own
            # call, so neither finds its data warmer in the cache than the other (the
            # candidate is frozen meanwhile: it cannot start on its inputs early)
            side = cand if who == "cand" else ref
            if self.cfg.device == "cuda":
                with _side("reference"):
                    ref.job.send("flush")
                    ref.job.expect("flushed")

            def stage(side: _Side = side) -> None:
                with self.cfg.cores.staging():
                    side.region.span("in", n).copy_(staged)
                    side.region.span("out", n).fill_(0xFF)

            if who == "cand":
                self.freeze.freeze(False)
                try:
                    times[who], seen = cand.timed(n, self.part, self.spin_s, probe, stage, self.freeze)
                finally:
                    self.freeze.freeze(True)
            else:
                times[who], _ = ref.timed(n, self.part, self.spin_s, probe, stage)
        # the reference's worker writes the next inputs while this round is checked (the
        # candidate stays frozen until its next round, and the reference is not being timed)
        self._request(next_n)
        self._check(n, first, probe, seen)
        return times["ref"], times["cand"]

    def _check(self, n: int, first: int, probe: torch.Tensor, seen: torch.Tensor | list[int] | None) -> None:
        """Every timed call's result, with the candidate frozen."""
        cand, ref, part = self.cand.region, self.ref.region, self.part
        if not self.cfg.inplace and not torch.equal(cand.span("in", n), ref.span("stage", n, first)):
            raise TimingRejected("rejected", "the candidate modified its inputs during a timed call")
        got_words = _words(cand.span(part, n))
        if seen is not None and got_words.numel() and not _same(got_words[probe], seen):
            raise TimingRejected("rejected", "the output changed after the call returned (work left running after it answered)")
        if torch.equal(cand.span(part, n), ref.span(part, n)):
            self.checked += n
            return
        lay = cand.layout
        key = "ins" if self.cfg.inplace else "outs"
        metas = lay["in_meta"] if self.cfg.inplace else lay["out_meta"]
        for s in range(n):
            got = [t for t in shm.views(cand.bytes, metas, lay[key][s]) if isinstance(t, torch.Tensor)]
            want = [t for t in shm.views(ref.bytes, metas, lay[key][s]) if isinstance(t, torch.Tensor)]
            mismatch: Mismatch | None = compare(want, got, self.cfg.atol, self.cfg.rtol)
            if mismatch is not None:
                raise TimingRejected("wrong", f"a timed call gave a wrong result: {mismatch.line()}",
                                     dict(mismatch.details, output=mismatch.output, timed=True))
        self.checked += n


def _same(now: torch.Tensor, seen: torch.Tensor | list[int]) -> bool:
    return now.tolist() == seen if isinstance(seen, list) else torch.equal(now, seen)


_OVERHEAD: dict[str, float | None] = {}


def call_overhead_us(in_meta: list, out_meta: list, device: str) -> float | None:
    """What the compiled call path costs per call for this argument layout, measured in this
    (trusted) process with the helper's no-op kernel; once per layout and process."""
    key = repr((in_meta, [(list(shape), dtype) for shape, dtype in out_meta], device))
    if key not in _OVERHEAD:
        try:
            _OVERHEAD[key] = callpath.overhead_us(in_meta, out_meta, device)
        except Warning:  # warnings turned into errors, the helper unloadable here: not measured
            _OVERHEAD[key] = None
    return _OVERHEAD[key]


def _words(span: torch.Tensor) -> torch.Tensor:
    """A slot span as 8-byte words (spans are 64-byte aligned and sized)."""
    return span.view(torch.int64) if span.numel() % 8 == 0 else span[: span.numel() - span.numel() % 8].view(torch.int64)


#: how unlikely (one-sided) the candidate's share of the one-sided disturbances must be, were
#: disturbances spread over the sides by the time each was timed, for them to count as its own
OWN_P = 1e-3


def own_disturbance(cand_alone: int, ref_alone: int, cand_share: float) -> bool:
    """Whether the candidate caused its own disturbed rounds: other work strikes either side in
    proportion to the time it is timed, while a candidate can keep its own server waiting on
    the rounds it chooses (a thread of its own on the same core) and so have its slow rounds
    set aside. True when its count of rounds disturbed alone is beyond chance (:data:`OWN_P`)."""
    n = cand_alone + ref_alone
    if not cand_alone or not 0.0 < cand_share < 1.0:
        return False
    tail = sum(math.comb(n, k) * cand_share ** k * (1 - cand_share) ** (n - k) for k in range(cand_alone, n + 1))
    return tail < OWN_P


def rounds_notes(kept: int, disturbed: int, min_rounds: int) -> tuple[list[str], Disturbed]:
    """What a workload's timing says about its rounds, and what becomes of the disturbed ones:
    counted when too few undisturbed rounds came, because other work had the CPU (a busy
    machine, which :func:`check._busy_share` takes as wholly disturbed) or because each round is
    long (an idle H200 fitted 12 rounds of a 64 MiB workload in the time allowed), which says
    nothing of load."""
    set_aside = f"{disturbed} of {disturbed + kept} rounds set aside: other work on the machine had the CPU during them"
    if kept + disturbed < min_rounds:
        counted = f" ({disturbed} disturbed, counted too)" if disturbed else ""
        return [f"only {kept + disturbed} rounds fit in the time allowed, {min_rounds} were asked for: "
                f"each round's calls are long{counted}"], Disturbed.LONG_ROUNDS
    if kept < min_rounds:
        return [set_aside, f"the machine was too busy for {min_rounds} undisturbed rounds: the disturbed ones are counted too"], \
            Disturbed.TOO_BUSY
    return ([set_aside] if disturbed else []), Disturbed.SET_ASIDE
