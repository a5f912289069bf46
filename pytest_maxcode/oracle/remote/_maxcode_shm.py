"""Shared-memory call slots and the doorbell the trusted side times calls through.

Imported by the worker processes (as ``_maxcode_shm``) and by the trusted side (as
``pytest_maxcode.oracle.remote._maxcode_shm``); it imports nothing from the package.

A region (one memfd) holds a control block and ``slots`` copies of a call's tensors:

    [control: 16 little-endian uint64 words][in slot 0..k-1][out slot 0..k-1][stage slot 0..2k-1]

Control words 0-4 are the protocol's; word ``SLEEPING + w`` is 1 while a waiter sleeps on word
``w``, so a waker makes the futex system call (about 1 µs, inside the timed interval on both
sides) only when someone sleeps.

The trusted side writes the inputs, rings the doorbell with a random token and stops its
clock when ``DONE`` holds that token. The serving process cannot learn the token before
the ring, so it cannot answer early; whatever it writes is data the trusted side checks.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import time

import torch

# control words
DOORBELL, DONE, ARMED, FAILED, READY = 0, 1, 2, 3, 4
#: word SLEEPING + w is set while a waiter sleeps on word w
SLEEPING = 8
CONTROL_BYTES = 128
#: checks of a word after announcing sleep and before sleeping: longer than any store takes to
#: become visible to the other core, so a waker that read "not sleeping" has been seen by then
SETTLE_CHECKS = 256
ALIGN = 64
#: seconds a waiter polls a control word before it sleeps on it
SPIN_S = 0.002
#: an armed server spins this long for its doorbell: a candidate's is frozen (using no CPU)
#: while its inputs are written after it armed, and a futex wake-up after the thaw would fall
#: inside its interval
DOORBELL_SPIN_S = 0.02


def _nbytes(shape, stride, itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, stride))) * itemsize


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def tensor_meta(values: list) -> list:
    """The layout-relevant facts of one input set: ("t", shape, stride, dtype) or ("s", value)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            # empty_like keeps a dense tensor's strides (a transposed input stays transposed), else contiguous
            stride = list(torch.empty_like(v).stride())
            out.append(("t", list(v.shape), stride, str(v.dtype).replace("torch.", "")))
        else:
            out.append(("s", v))
    return out


def layout(in_meta: list, out_meta: list, slots: int, stage: bool = False) -> dict:
    """Byte offsets of every tensor of every slot; plain data, so it can cross the channel."""
    def place(metas: list, cursor: int, count: int = slots) -> tuple[list, int, list]:
        slot_entries, bounds = [], []
        for _ in range(count):
            bounds.append(cursor)
            entries = []
            for m in metas:
                if m[0] != "t":
                    entries.append(None)
                    continue
                _, shape, stride, dtype = m
                n = _nbytes(shape, stride, torch.empty((), dtype=getattr(torch, dtype)).element_size())
                entries.append((cursor, n))
                cursor = _align(cursor + n)
            slot_entries.append(entries)
        bounds.append(cursor)
        return slot_entries, cursor, bounds

    outs = [("t", list(shape), list(torch.empty(shape).stride()) if shape else [], dtype) for shape, dtype in out_meta]
    ins, cursor, in_bounds = place(in_meta, CONTROL_BYTES)
    out_entries, cursor, out_bounds = place(outs, cursor)
    # two staging areas: the next round's inputs are written while this round is checked
    stage_entries, cursor, stage_bounds = place(in_meta, cursor, 2 * slots) if stage else ([], cursor, [])
    return {
        "slots": slots, "in_meta": in_meta, "out_meta": outs, "ins": ins, "outs": out_entries, "stage": stage_entries,
        "bounds": {"in": in_bounds, "out": out_bounds, "stage": stage_bounds},
        "size": max(cursor, CONTROL_BYTES),
    }


def views(data, metas: list, entries: list, base: int = 0) -> list:
    """Tensors over ``data`` (uint8) for one slot; ``base``: the byte offset ``data`` starts at."""
    out = []
    for m, e in zip(metas, entries):
        if e is None:
            out.append(m[1])
            continue
        _, shape, stride, dtype = m
        dt = getattr(torch, dtype)
        off, n = e
        if not n:
            out.append(torch.empty(shape, dtype=dt))
            continue
        out.append(data[off - base : off - base + n].view(dt).as_strided(shape, stride))
    return out


_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not PRIVATE): the word lives in memory two processes map
_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def wake(addr: int) -> None:
    """Wake whoever sleeps on the control word at ``addr`` (its low 32 bits are the futex)."""
    if _SYS_FUTEX is not None:
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, 2147483647, None, None, 0)


def notify(ctl, base: int, word: int) -> None:
    """Wake the waiter on ``word`` if it sleeps (it says so in ``SLEEPING + word``); a spinning
    waiter sees the new value by itself, and the system call is saved."""
    if ctl[SLEEPING + word]:
        wake(base + 8 * word)


def wait(ctl, base: int, word: int, ready, spin_s: float = 0.002, timeout_s: float = 10.0, check=None) -> bool:
    """Until ``ready()``: spin for ``spin_s`` (an answer within it costs no wake-up), then sleep on the futex.

    Waking a sleeping process costs tens of microseconds on a VM (its idle virtual CPU must
    be woken), so an answer that is due soon is awaited spinning; sleeping frees the core
    when it is not (on a loaded 2-core runner two spinning processes would be descheduled
    for whole time slices). ``check()`` runs between sleeps and may raise (a deadline, a
    peer that is gone). Seven parameters because the worker, which imports nothing from the
    package, calls it with the raw mapping and offsets; the tests call it the same way.
    """
    now = time.perf_counter
    spin_end = now() + spin_s
    i = 0
    while not ready():
        i += 1
        if not i & 63 and now() > spin_end:
            break
    else:
        return True
    end = time.monotonic() + timeout_s
    addr = base + 8 * word
    ts = _Timespec(0, 2_000_000)  # 2 ms: a lost wake-up costs at most that
    ctl[SLEEPING + word] = 1
    try:
        # a waker that wrote the word before it could see the flag did not wake us: its write is
        # visible within these checks (a store takes nanoseconds to reach the other core)
        for _ in range(SETTLE_CHECKS):
            if ready():
                return True
        while not ready():
            seen = ctl[word] & 0xFFFFFFFF
            if ready():
                return True
            if _SYS_FUTEX is not None:
                _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT, ctypes.c_uint32(seen), ctypes.byref(ts), None, 0)
            else:
                time.sleep(0.0001)
            if check is not None:
                check()
            if time.monotonic() > end:
                return False
        return True
    finally:
        ctl[SLEEPING + word] = 0


def create(size: int, name: str = "maxcode-slots") -> int:
    """A memfd of ``size`` bytes (pages are only allocated when touched)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


class Region:
    """A mapped region: control words and tensor views of each slot."""

    def __init__(self, fd: int, lay: dict) -> None:
        self.layout = lay
        self.map = mmap.mmap(fd, lay["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.ctl = memoryview(self.map)[:CONTROL_BYTES].cast("Q")
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.base = ctypes.addressof(self._anchor)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.inputs = [views(self.bytes, lay["in_meta"], entries) for entries in lay["ins"]]
        self.outputs = [views(self.bytes, lay["out_meta"], entries) for entries in lay["outs"]]
        self.staged = [views(self.bytes, lay["in_meta"], entries) for entries in lay["stage"]]

    def span(self, name: str, n: int, first: int = 0):
        """The bytes of slots [first, first + n) of "in", "out" or "stage", as one uint8 tensor."""
        bounds = self.layout["bounds"][name]
        return self.bytes[bounds[first] : bounds[first + n]]

    def close(self) -> None:
        self.inputs = self.outputs = self.staged = []
        self.bytes = None
        self._anchor = None
        self.ctl.release()
        try:
            self.map.close()
        except BufferError:
            pass  # a tensor view still holds it; freed with the last view


def serve_round(region: Region, round_id: int, run, limit_s: float = 60.0) -> bool:
    """Arm, wait for the doorbell, run the calls, answer with the bell's token.

    The trusted side rings only after seeing ``ARMED``. Returns False when no ring came
    within ``limit_s`` (the trusted side gave up on this round).
    """
    ctl, base = region.ctl, region.base
    ctl[ARMED] = round_id
    notify(ctl, base, ARMED)
    if not wait(ctl, base, DOORBELL, lambda: ctl[DOORBELL] != 0, spin_s=DOORBELL_SPIN_S, timeout_s=limit_s):
        return False
    token = ctl[DOORBELL]
    try:
        run()
    except BaseException:
        ctl[FAILED] = 1
        ctl[DONE] = token
        notify(ctl, base, DONE)
        raise
    ctl[DONE] = token
    notify(ctl, base, DONE)
    return True
