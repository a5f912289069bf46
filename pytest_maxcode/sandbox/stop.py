"""Freezing a sandbox with signals where no freezer cgroup can be written, and what makes it safe.

SIGSTOP goes to every process of the tree, listed from ``/proc``. A process forked between the
listing and the stop is caught on a later pass, but a chain of processes that each fork and
exit at once (attack class 7's escape) outruns any number of passes. So a stop is checked:
when the sandbox is resumed, its processes and their CPU ticks (``/proc/PID/stat``: what each
used, and what it reaped) are compared with what they were once every process had stopped. A
process that was not there, or a tick more, means something of the sandbox ran while it was
to be frozen, and :attr:`SignalFreeze.ran` says so; the trusted side rejects the timing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

#: states of a process that runs no more: stopped, traced, zombie, dead
_STILL = frozenset(b"TtZX")
#: how long a stop may take to reach every process before the tree is snapshotted anyway
_SETTLE_S = 0.05


def stat_fields(pid: int | str) -> list[bytes]:
    """``/proc/PID/stat`` after the command name (which may hold spaces): field 3 (the state)
    first; empty when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def tree(root: int) -> dict[int, tuple[bytes, int]]:
    """``root`` and every live process below it: pid -> (state, CPU ticks used and reaped)."""
    stats: dict[int, tuple[int, bytes, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(name)
        if len(fields) > 15:  # state, ppid, ..., utime stime cutime cstime (fields 14 to 17 of stat)
            stats[int(name)] = (int(fields[1]), fields[0], sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state, _ticks) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, tuple[bytes, int]] = {}
    frontier = [root] if root in stats else []
    while frontier:
        for pid in frontier:
            out[pid] = stats[pid][1:]
        frontier = [c for p in frontier for c in children.get(p, ())]
    return out


def descendants(root: int) -> list[int]:
    """Every live process below ``root``, nearest first."""
    return [pid for pid in tree(root) if pid != root]


class SignalFreeze:
    """Stops and resumes the process tree under ``root`` with SIGSTOP/SIGCONT; :attr:`ran` says
    (once, the first time) what of it ran while it was to be stopped."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.ran: str | None = None
        self._stopped: dict[int, tuple[bytes, int]] | None = None

    @property
    def stopped(self) -> bool:
        """Stopped by :meth:`stop` and not resumed since."""
        return self._stopped is not None

    def stop(self) -> None:
        # every process listed is stopped, then listed again until none is still running: a fork
        # between one listing and its stop shows in the next one, still running, and is stopped
        for pid in tree(self.root):
            _signal(pid, signal.SIGSTOP)
        end = time.monotonic() + _SETTLE_S
        snapshot = tree(self.root)
        while any(state[0] not in _STILL for state, _ in snapshot.values()) and time.monotonic() < end:
            for pid, (state, _) in snapshot.items():
                if state[0] not in _STILL:
                    _signal(pid, signal.SIGSTOP)
            time.sleep(0.001)
            snapshot = tree(self.root)
        self._stopped = snapshot

    def resume(self) -> None:
        self.resumer()()

    def resumer(self) -> Callable[[], None]:
        """Everything of a resume but the signals, done now: the tree listed and checked for what
        ran while it was stopped. The call it returns sends the SIGCONTs (a timer starts its
        clock between the two, so a process woken first cannot start before it)."""
        now = tree(self.root)
        if self._stopped is not None and self.ran is None:
            self.ran = _what_ran(self._stopped, now)
        self._stopped = None
        pids = list(now)

        def cont() -> None:
            for pid in pids:
                _signal(pid, signal.SIGCONT)

        return cont


def _what_ran(stopped: dict[int, tuple[bytes, int]], now: dict[int, tuple[bytes, int]]) -> str | None:
    new = [pid for pid in now if pid not in stopped]
    ticks = sum(max(0, now[pid][1] - stopped[pid][1]) for pid in now if pid in stopped)
    if not (new or ticks):  # one still waking to its stop when snapshotted, that used no CPU, is no sign
        return None
    parts = []
    if new:
        parts.append(f"{len(new)} process(es) started")
    if ticks:
        parts.append(f"{ticks * 1000 // os.sysconf('SC_CLK_TCK')} ms of CPU time was used")
    return "; ".join(parts)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group ``proc`` leads (started with ``start_new_session``) and reap
    ``proc``: under a namespace its root, so the sandbox's PID namespace goes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
