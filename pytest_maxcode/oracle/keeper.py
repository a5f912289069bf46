"""The keeper: a trusted process that starts the candidate's clock and makes its thaw on the
candidate's own core.

The candidate's clock starts before its thaw (a thaw wakes the sandbox's threads one by one, and
one woken before the clock could work untimed), so what the thaw costs is the candidate's. Made
from the timer's core, it crossed to a core that had nothing to run while the inputs were
written, and an idle vCPU halts (30 to 40 µs to wake on the 2-core VM). The keeper spins on the
candidate's core at ``SCHED_IDLE`` from the freeze until the timer asks, reads the clock, writes
the freezer's state (a local wake-up) and sleeps at once, so the woken thread has the core. In a
two-process experiment: 37 to 70 µs from clock to a spinning child's answer when the timer
thawed it from its own core, 3.5 µs when the keeper did; the oracle's ring of a no-op kernel
measured 68 to 122 µs for the candidate without the keeper and 40 to 63 µs with it.

Nothing of this can start a candidate before its clock: the clock is read before the write,
wherever the write is made. The round's one ticket (a pipe byte that exactly one reader gets)
decides who thaws: a keeper that has not taken it within :data:`TAKE_NS` is passed over and the
timer thaws, and a keeper that took it but cannot be waited for is killed, so no thaw of a
round can come late. The next round uses the keeper only once it has left the last one.
"""

from __future__ import annotations

import atexit
import mmap
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..sandbox.stop import stat_fields

#: the words shared with the keeper's process (_keeper_loop.py)
MODE, REQUEST, STARTED, T0, THAWED, LEFT = range(6)
#: ns the timer waits for the keeper to take a thaw before it makes the thaw itself
TAKE_NS = 300_000
#: ns a round waits, untimed, for the keeper to leave the last one before it does without
LEFT_NS = 2_000_000
#: seconds the timer waits for a keeper that took a ticket before it kills it
STUCK_S = 1.0
LOOP = Path(__file__).with_name("_keeper_loop.py")
_NOW = time.perf_counter_ns


class Keeper:
    """One keeper process on one core."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        #: thaws the keeper made, and thaws the timer made after passing it over
        self.took = 0
        self.passed = 0
        shared = os.memfd_create("maxcode-keeper", os.MFD_CLOEXEC)
        os.ftruncate(shared, 64)
        self._map = mmap.mmap(shared, 64)
        self.words = memoryview(self._map).cast("q")
        self._ticket_r, self._ticket_w = os.pipe()
        os.set_blocking(self._ticket_r, False)
        commands, self._commands = os.pipe()
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LOOP), str(cpu), str(self._ticket_r), str(shared)],
                stdin=commands, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(self._ticket_r, shared), env={})
        finally:
            os.close(commands)
            os.close(shared)
        self.token = 0
        #: whether the timer took this round's ticket back (it made the thaw)
        self._mine = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def thaw_by(self, state: tuple[str, bytes, bytes], thawer: Callable[[], Callable[[], None]]) -> Thaw:
        """This round's start: by the keeper, when it has left the last round; else by the timer.
        Call right after the freeze, before the inputs are written (the keeper wakes meanwhile)."""
        w = self.words
        if not self.alive or not _until(lambda: self.token == 0 or w[LEFT] == self.token, LEFT_NS):
            return Thaw(thawer)
        token = secrets.randbits(62) | 1
        w[REQUEST] = 0
        w[MODE] = token
        self.token = token
        self._mine = False
        os.write(self._ticket_w, b"t")
        path, value, _ = state
        try:
            os.write(self._commands, b"%d %s %s\n" % (token, value, path.encode()))
        except OSError:
            self.stop()
        return _KeeperThaw(thawer, self, token)

    def start(self, token: int, thawer: Callable[[], Callable[[], None]]) -> int:
        """Ask for the thaw; the clock's start (ns), read before the thaw was written."""
        w = self.words
        w[REQUEST] = token
        asked = _NOW()
        while w[STARTED] != token:
            if _NOW() - asked > TAKE_NS and self._take_back():
                self._mine = True
                self.passed += 1
                return by_timer(thawer)
            if _NOW() - asked > STUCK_S * 1e9:
                self.stop()  # what it has not written by now it never writes
                if w[STARTED] != token:
                    return by_timer(thawer)
                thawer()()  # its clock was read; whether its write was made, this one is
                break
        self.took += 1
        return w[T0]

    def finish(self, token: int, answered: bool) -> None:
        """End the round. Without an answer, a thaw the keeper took may still be on its way:
        waited for, else the keeper is killed, so that none comes while the sandbox is frozen."""
        w = self.words
        w[MODE] = 0
        if answered or self._mine or self._take_back():
            return
        if not _until(lambda: w[THAWED] in (token, -token), 50_000_000):
            self.stop()

    def _take_back(self) -> bool:
        """Whether the timer got the round's ticket (the keeper had not taken it)."""
        try:
            return bool(os.read(self._ticket_r, 1))
        except BlockingIOError:
            return False

    def stop(self) -> None:
        """Kill the keeper's process and wait for it: nothing it had not written comes after."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            os.close(self._commands)


class Thaw:
    """The start of a candidate's call: all of the resume but its last step (``thawer``: for a
    stop by signals, the check of what ran while stopped), the clock read, the last step."""

    def __init__(self, thawer: Callable[[], Callable[[], None]]) -> None:
        self.thawer = thawer

    def __call__(self) -> int:
        return by_timer(self.thawer)

    def finish(self, answered: bool) -> None:
        """The round is over (``answered``: the candidate answered its doorbell)."""


class _KeeperThaw(Thaw):
    def __init__(self, thawer: Callable[[], Callable[[], None]], keeper: Keeper, token: int) -> None:
        super().__init__(thawer)
        self.keeper, self.token = keeper, token

    def __call__(self) -> int:
        return self.keeper.start(self.token, self.thawer)

    def finish(self, answered: bool) -> None:
        self.keeper.finish(self.token, answered)


def by_timer(thawer: Callable[[], Callable[[], None]]) -> int:
    """The thaw made from the timer's core: all of the resume but its last step, the clock read
    (returned, ns), the last step."""
    thaw = thawer()
    t0 = _NOW()
    thaw()
    return t0


def _until(ready: Callable[[], bool], ns: int) -> bool:
    end = _NOW() + ns
    while not ready():
        if _NOW() > end:
            return False
        os.sched_yield()
    return True


_KEEPERS: dict[tuple[int, int], Keeper] = {}


def keeper(cpu: int) -> Keeper:
    """This process's keeper of ``cpu`` (started on first use; a killed one is replaced)."""
    key = (os.getpid(), cpu)
    k = _KEEPERS.get(key)
    if k is None or not k.alive:
        if not _KEEPERS:
            atexit.register(_stop_all)
        k = _KEEPERS[key] = Keeper(cpu)
    return k


def _stop_all() -> None:
    for (pid, _), k in list(_KEEPERS.items()):
        if pid == os.getpid():
            k.stop()


def last_cpu(pid: int) -> int | None:
    """The core ``pid``'s main thread last ran on (field 39 of ``/proc/PID/stat``)."""
    fields = stat_fields(pid)
    return int(fields[36]) if len(fields) > 36 else None
