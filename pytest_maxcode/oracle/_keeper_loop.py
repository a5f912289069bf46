"""The keeper's process (oracle/keeper.py): trusted, started by the oracle, imports nothing of
the package and loads no candidate code. Run as ``python -I -S _keeper_loop.py CPU TICKET WORDS``.

CPU: the core it keeps. TICKET: the read end of the ticket pipe (non-blocking), which holds one
byte for a round: whoever reads it makes that round's thaw, this process or the timer. WORDS:
an fd of 64 shared bytes, native int64 words (named in keeper.py). fd 0: one command line a
round, ``TOKEN VALUE PATH``: spin for round TOKEN and, when asked, thaw the freezer whose state
file is PATH by writing VALUE.
"""

import mmap
import os
import signal
import sys
import time

MODE, REQUEST, STARTED, T0, THAWED, LEFT = range(6)
#: seconds a round is spun for at most before the keeper goes back to waiting for commands
SPIN_LIMIT_S = 2.0
FD_CACHE = 16


def main() -> None:
    cpu, ticket, shared = map(int, sys.argv[1:4])
    # a terminal's Ctrl-C goes to the whole process group: the oracle decides what ends this
    # process (its commands' end of file, or a kill)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    words = memoryview(mmap.mmap(shared, 64)).cast("q")
    commands = os.fdopen(0, "rb", buffering=0)
    fds: dict[bytes, int] = {}
    now = time.perf_counter_ns
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = commands.read(4096)
            if not chunk:
                return
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        token_text, value, path = line.split(b" ", 2)
        token = int(token_text)
        if words[MODE] != token:
            words[LEFT] = token
            continue  # a round the timer has already left
        fd = fds.get(path)
        if fd is None:
            if len(fds) >= FD_CACHE:
                for old in fds.values():
                    os.close(old)
                fds.clear()
            try:
                fd = fds[path] = os.open(path, os.O_WRONLY)
            except OSError:
                words[LEFT] = token
                continue  # the timer takes the ticket back and thaws it itself
        end = time.monotonic() + SPIN_LIMIT_S
        while words[MODE] == token:
            if words[REQUEST] == token:
                try:
                    os.read(ticket, 1)
                except BlockingIOError:
                    break  # the timer took the ticket: it thaws
                t0 = now()
                words[T0] = t0  # the clock's start, published before the thaw
                words[STARTED] = token
                try:
                    os.pwrite(fd, value, 0)
                    done = token
                except OSError:
                    done = -token
                words[THAWED] = done
                break
            if time.monotonic() > end:
                break
        words[LEFT] = token  # the timer arms the next round with it only after this


if __name__ == "__main__":
    main()
