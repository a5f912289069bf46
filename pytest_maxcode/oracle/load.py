"""How loaded the machine was while a block was timed, read from the kernel's own counters.

The rounds a timer sets aside (a side waited for a CPU during them) see preemption only, and
beside a CPU hog on two cores most rounds are not preempted at all: the server wakes on its
doorbell ahead of the hog. Yet whole runs then differ by 1.5x (a shared CI runner: three runs
near 3x, then three near 2x, each run's blocks within 12% of each other), because the other work
shares the core's caches, its hyperthread sibling and the host. CPU pressure (PSI: the share of
wall time in which some runnable task waited for a CPU) and the host's steal time see that load
whether or not it preempted a round. Read by the trusted process; nothing a candidate runs can
lower them (it can only raise them, which widens its own interval).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

PSI_CPU = "/proc/pressure/cpu"
PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class Reading:
    """Counters at one moment: µs of CPU pressure (None without PSI), steal and all jiffies."""

    at: float
    pressure_us: int | None
    steal: int
    total: int


@dataclass(frozen=True)
class Load:
    """The machine's load between two readings, as shares of that time."""

    #: share of the time in which some runnable task waited for a CPU; None without PSI
    pressure: float | None
    #: share of the CPUs' time the host gave to others (a VM's noisy neighbours)
    steal: float

    @property
    def share(self) -> float:
        """The larger of the two: how much of the time other work stood in the way."""
        return max(self.pressure or 0.0, self.steal)


def _pressure_us() -> int | None:
    try:
        with open(PSI_CPU) as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _stat() -> tuple[int, int]:
    try:
        with open(PROC_STAT) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def read() -> Reading:
    steal, total = _stat()
    return Reading(time.monotonic(), _pressure_us(), steal, total)


def between(a: Reading, b: Reading) -> Load:
    wall_us = max((b.at - a.at) * 1e6, 1.0)
    pressure = None
    if a.pressure_us is not None and b.pressure_us is not None:
        pressure = min(1.0, max(0.0, (b.pressure_us - a.pressure_us) / wall_us))
    jiffies = b.total - a.total
    steal = (b.steal - a.steal) / jiffies if jiffies > 0 else 0.0
    return Load(pressure, min(1.0, max(0.0, steal)))
