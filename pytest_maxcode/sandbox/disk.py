"""A cap on what a sandbox writes to its job folder, all its files together.

``RLIMIT_FSIZE`` caps each file, not their sum, and the job folder is a folder of the host's
disk (the trusted side reads builds and counts from it), not a size-limited tmpfs: a
candidate writing file after file under the per-file limit would fill the disk. A small
process of the trusted side sums the folder's allocated blocks every :data:`EVERY` seconds
and kills the sandbox's process group the first time they pass the cap; it can overshoot by
what the candidate writes in one interval (about 100 MB at 2 GB/s), never more.

A process, not a thread: a thread of the trusted process would take the interpreter's lock
from the timer in the middle of a timed call. It runs this file by path in isolated mode
(``python -I``), importing only the standard library.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

#: folders with more entries than this are over the cap whatever their size: summing them
#: would take longer than the interval
MAX_ENTRIES = 50_000
EVERY = 0.05


def usage(folders: Sequence[str | Path], max_entries: int = MAX_ENTRIES) -> int | None:
    """Bytes allocated under ``folders`` (links not followed, sparse holes not counted), or
    None when they hold more than ``max_entries`` entries."""
    total, entries = 0, 0
    stack = [str(f) for f in folders]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    if entries > max_entries:
                        return None
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # removed meanwhile
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def over(folders: Sequence[str | Path], cap: int, base: int = 0) -> str | None:
    """Why ``folders`` hold more than ``cap`` bytes beyond ``base``, in a line a verdict can
    quote; None if they do not."""
    used = usage(folders)
    if used is not None and used - base <= cap:
        return None
    what = f"more than {MAX_ENTRIES} files" if used is None else f"{(used - base) / 2**20:.0f} MiB"
    return f"wrote {what} to its job folder (the cap is {cap / 2**20:.0f} MiB for all its files together)"


def empty(folder: Path) -> None:
    """Remove everything in ``folder`` (links themselves, not what they name)."""
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


class FolderWatch:
    """Watches a sandbox's folders from its start to :meth:`stop`; kills process group ``pgid``
    once they pass ``cap`` bytes, and :meth:`exceeded` then says why.

    ``pgid`` 0: nothing to kill yet; :meth:`aim` names each run's process group as it starts,
    and the cap then counts what the folders gained since (a folder the caller shares with its
    own files, a build beside the program, is not held against the run)."""

    def __init__(self, folders: Sequence[Path], cap: int, pgid: int = 0) -> None:
        self.folders, self.cap = [str(f) for f in folders], cap
        self._said = ""
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-I", __file__, str(os.getpid()), str(cap), str(pgid), *self.folders],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def aim(self, pgid: int) -> None:
        """Watch for process group ``pgid`` now (0: for none), counting from what the folders hold."""
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write(f"{pgid}\n")
                self._proc.stdin.flush()
            except OSError:  # it fired and ended: exceeded() says so
                pass

    def exceeded(self) -> str | None:
        """Why the sandbox was killed for its files (the watch has then ended), else None."""
        if self._proc is not None and self._proc.stdout is not None and (
                self._proc.poll() is not None or select.select([self._proc.stdout], [], [], 0)[0]):
            self._collect()
        return self._said or None

    def stop(self) -> str | None:
        """End the watch; what :meth:`exceeded` says."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._collect()
        return self._said or None

    def _collect(self) -> None:
        assert self._proc is not None
        try:
            out, _ = self._proc.communicate()
        except (OSError, ValueError):
            out = ""
        self._said = out.strip()
        self._proc = None


class RunWatches:
    """One :class:`FolderWatch` per folder that short runs (a C++ program's) take turns in: a
    watch process per run would cost tens of milliseconds each."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._lock = threading.Lock()
        self._watches: dict[str, FolderWatch] = {}

    def aim(self, folder: Path, pgid: int) -> None:
        with self._lock:
            watch = self._watches.get(str(folder))
            if watch is None or watch.exceeded() is not None:
                watch = self._watches[str(folder)] = FolderWatch([folder], self.cap)
        watch.aim(pgid)

    def disarm(self, folder: Path) -> str | None:
        """The run in ``folder`` ended: why its process group was killed for its files, if it was."""
        with self._lock:
            watch = self._watches.get(str(folder))
        if watch is None:
            return None
        why = watch.exceeded()
        if why is None:
            watch.aim(0)
            why = watch.exceeded()
        if why is not None:
            with self._lock:
                self._watches.pop(str(folder), None)
        return why

    def close(self) -> None:
        with self._lock:
            watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            watch.stop()


def _watch(parent: int, cap: int, pgid: int, folders: list[str]) -> None:
    base, pending = 0, b""
    while os.getppid() == parent:
        ready, _, _ = select.select([0], [], [], EVERY)
        if ready:  # unbuffered: every line that has come, the last one the run now going
            data = os.read(0, 4096)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            if lines:
                pgid = int(lines[-1])
                base = (usage(folders) or 0) if pgid else 0
        if not pgid:
            continue
        why = over(folders, cap, base)
        if why is not None:
            # said before the kill: once the run is dead, the reason is already in the pipe
            print(why, flush=True)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
            return


if __name__ == "__main__":
    _watch(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
