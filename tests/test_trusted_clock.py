"""The pieces of the trusted clock: the worker protocol's validation, the shared-memory call
slots and the doorbell, and the freezer that stops a sandbox while the reference is timed."""

from __future__ import annotations

import bisect
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_maxcode.oracle import timing
from pytest_maxcode.oracle.protocol import ProtocolError, validate
from pytest_maxcode.oracle.remote import _maxcode_shm as shm
from pytest_maxcode.sandbox import isolation


def test_well_formed_events_pass_and_keep_their_data() -> None:
    ev = validate(("outputs", {"workload": "default", "set": 2, "outputs": [torch.zeros(3)]}))
    assert ev.name == "outputs" and ev.kwargs["set"] == 2
    assert validate(("error", {"status": "wrong", "message": "m", "detail": ""})).kwargs["status"] == "wrong"


@pytest.mark.parametrize(
    ("msg", "why"),
    [
        (("timing", {"workload": "default"}), "unknown event"),
        (("done", {"extra": 1}), "keywords"),
        (("outputs", {"workload": "default", "set": "0", "outputs": []}), "set is not valid"),
        (("outputs", {"workload": "default", "set": True, "outputs": []}), "set is not valid"),
        (("error", {"status": "faster", "message": "", "detail": ""}), "status is not valid"),
        (["done", {}], "not a (name, {keywords}) event"),
        (("loaded",), "not a (name, {keywords}) event"),
        (("outputs", {"workload": "default", "set": 0, "outputs": [1.0]}), "outputs is not valid"),
    ],
)
def test_anything_else_is_a_protocol_error_with_the_reason(msg: object, why: str) -> None:
    with pytest.raises(ProtocolError, match=why.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{").replace("}", r"\}")):
        validate(msg)


def test_slots_lay_out_every_tensor_aligned_and_views_share_the_memory() -> None:
    x = torch.randn(3, 5).t()  # non-contiguous: its strides are kept
    meta = shm.tensor_meta([x, 0.5, torch.arange(7, dtype=torch.int64)])
    lay = shm.layout(meta, [([5, 3], "float32")], slots=3, stage=True)
    fd = shm.create(lay["size"])
    try:
        region = shm.Region(fd, lay)
        for s in range(3):
            a, scalar, b = region.inputs[s]
            assert a.shape == x.shape and a.stride() == x.stride() and scalar == 0.5 and b.dtype == torch.int64
            a.copy_(x)
            b.fill_(s)
        assert all(e[0] % shm.ALIGN == 0 for slot in lay["ins"] for e in slot if e is not None)
        again = shm.Region(fd, lay)  # a second mapping (the other process) sees the same bytes
        assert torch.equal(again.inputs[2][0], x) and int(again.inputs[2][2][0]) == 2
        assert region.span("in", 2).numel() == lay["bounds"]["in"][2] - lay["bounds"]["in"][0]
        region.close()
        again.close()
    finally:
        os.close(fd)


SERVER = r"""
import os, sys
sys.path.insert(0, sys.argv[3])
import _maxcode_shm as shm
import torch
fd, rounds = int(sys.argv[1]), int(sys.argv[2])
lay = shm.layout([("t", [4], [1], "float32")], [([4], "float32")], 1)
region = shm.Region(fd, lay)
for r in range(1, rounds + 1):
    os.read(0, 1)
    shm.serve_round(region, r, lambda: region.outputs[0][0].copy_(region.inputs[0][0] * 2))
"""


def test_the_doorbell_answers_with_the_token_it_was_rung_with() -> None:
    """A server answers each ring with that ring's random token, after writing its outputs."""
    lay = shm.layout([("t", [4], [1], "float32")], [([4], "float32")], 1)
    fd = shm.create(lay["size"])
    region = shm.Region(fd, lay)
    r, w = os.pipe()
    remote = Path(shm.__file__).parent
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(fd), "5", str(remote)], stdin=r, pass_fds=[fd])
    os.close(r)
    try:
        ctl = region.ctl
        for rnd in range(1, 6):
            region.inputs[0][0].copy_(torch.arange(4.0) + rnd)
            ctl[shm.DOORBELL] = ctl[shm.DONE] = 0
            os.write(w, b"r")
            assert shm.wait(ctl, region.base, shm.ARMED, lambda: ctl[shm.ARMED] == rnd, timeout_s=30)
            token = secrets.randbits(63) | 1
            ctl[shm.DOORBELL] = token
            shm.wake(region.base + 8 * shm.DOORBELL)
            assert shm.wait(ctl, region.base, shm.DONE, lambda: ctl[shm.DONE] == token, timeout_s=30)
            assert torch.equal(region.outputs[0][0], (torch.arange(4.0) + rnd) * 2)
    finally:
        os.close(w)
        proc.wait(timeout=30)
        region.close()
        os.close(fd)
    assert proc.returncode == 0


needs_freezer = pytest.mark.skipif(
    not any(c == "freezer" for c, _ in isolation._cgroup_roots()), reason="no writable freezer cgroup here"
)


@needs_freezer
def test_a_frozen_sandbox_uses_no_cpu_until_thawed(tmp_path: Path) -> None:
    """Everything inside stops at once, threads and children included, and resumes after."""
    counter = tmp_path / "ticks"
    spinner = (
        "import os, threading, time\n"
        f"path = {str(counter)!r}\n"
        "def spin(who):\n"
        "    n = 0\n"
        "    while True:\n"
        "        n += 1\n"
        "        if n % 100000 == 0:\n"  # replaced whole: a read never finds it half written
        "            open(path + who, 'w').write(str(n))\n"
        "            os.replace(path + who, path)\n"
        "threading.Thread(target=spin, args=('.thread',), daemon=True).start()\n"
        "if os.fork() == 0:\n"
        "    spin('.child')\n"
        "time.sleep(600)\n"
    )
    box = isolation.prepare([sys.executable, "-c", spinner], isolation.resolve("none"), tmp_path,
                            isolation.Limits(freezable=True))
    # "none" makes no cgroups; make the freezer folder by hand for this process tree
    cg = isolation.Cgroups.make(isolation.Limits(memory=None, pids=None, freezable=True))
    proc = subprocess.Popen(["/bin/sh", "-c", f"echo $$ > {cg.folders['freezer'] / 'cgroup.procs'}; exec \"$@\"", "sh",
                             *box.argv], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not counter.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cg.freeze(True)
        frozen_at = counter.read_text()
        time.sleep(0.5)
        assert counter.read_text() == frozen_at  # neither the thread nor the child ran
        assert cg.freeze(False)
        time.sleep(0.5)
        assert counter.read_text() != frozen_at
    finally:
        cg.cleanup()
        proc.wait(timeout=30)
        box.cleanup()


def test_run_delay_sees_time_spent_waiting_for_a_cpu() -> None:
    # a busy process on this thread's only allowed CPU: the time this thread then waits
    # runnable is what marks a sample disturbed (issue 14)
    if not os.path.exists("/proc/self/schedstat"):
        pytest.skip("no schedstat on this kernel")
    cpu = min(os.sched_getaffinity(0))
    before_mask = os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    delay = timing.RunDelay([busy.pid])
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.2)  # the busy process is running on that CPU
        d0 = delay()
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
        waited = delay() - d0
    finally:
        os.sched_setaffinity(0, before_mask)
        busy.kill()
        busy.wait()
        delay.close()
    # sharing one CPU for 0.3 s, each side waits a good part of it
    assert waited > 30_000_000, waited
    assert timing.RunDelay([2**22 + 12345])() >= 0  # a process that is gone: only this thread is read


COPY_REF = '''
import torch


def f(x, y):
    return x + y


def get_inputs():
    return [torch.randn(4), torch.randn(4)]
'''

COPY_KERNEL = r'''
#include <dlpack/dlpack.h>
#include <cstdint>
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* y = static_cast<const float*>(in[1].data);
  float* z = static_cast<float*>(out[0].data);
  for (int i = 0; i < 4; ++i) z[i] = x[i] + y[i];
  return 0;
}
'''


def test_a_native_verdict_carries_the_call_path_and_its_overhead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker was handed the compiled call path, and the trusted side measured what it costs
    for this workload's two inputs and one output (the report states it beside the kernel time)."""
    from pytest_maxcode.native import abi, callpath
    from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
    from pytest_maxcode.oracle.reference import parse_reference

    (tmp_path / "ref.py").write_text(COPY_REF)
    (tmp_path / "add.cpp").write_text(COPY_KERNEL)
    seen: list[timing.WorkloadTiming] = []
    real = timing.time_workload

    def recorded(*args: object, **kwargs: object) -> timing.WorkloadTiming:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(result)
        return result

    monkeypatch.setattr(timing, "time_workload", recorded)
    ref = parse_reference(f"{tmp_path / 'ref.py'}:f", f"{tmp_path / 'ref.py'}:get_inputs")
    with Oracle(ref, CheckConfig(time_budget=0.05), tmp_path) as o:
        v = o.check([CandidateSpec.from_path(tmp_path / "add.cpp")])[0]
        assert o.zygote is not None and o.zygote.info["call_path"] == "compiled"
    assert v.status in ("faster", "not_faster", "slower"), v.reasons
    assert seen and all(t.call_path == "compiled" for t in seen)
    overhead = seen[0].call_overhead_us
    assert overhead is not None and 0 < overhead < 1000
    # the same path in this process: a no-op kernel through call_native, two 4-float inputs, one output
    noop = abi.NativeKernel.at_address(callpath.load().noop_address())
    x = torch.zeros(4)
    t0 = time.perf_counter_ns()
    for _ in range(1000):
        abi.call_native(noop, [x, x], (), [((4,), torch.float32)], "cpu")
    assert overhead < 20 * max((time.perf_counter_ns() - t0) / 1000 / 1e3, 1.0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: the timer and the servers cannot be kept apart")
def test_the_servers_keep_off_the_timers_core(tmp_path: Path) -> None:
    """Woken by the doorbell, a server could be queued on the timer's own core, and the two
    would take turns inside the measurement: every process the zygotes fork stays on the other
    cores, and the timer's thread is on its core only while it times."""
    from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
    from pytest_maxcode.sandbox.stop import descendants
    from pytest_maxcode.oracle.reference import parse_reference

    cores = timing.Cores.split()
    assert cores.timer is not None and cores.timer not in cores.servers
    assert set(cores.servers) | {cores.timer} == os.sched_getaffinity(0)
    me = threading.get_native_id()
    before = os.sched_getaffinity(me)
    with cores.timing():
        assert os.sched_getaffinity(me) == {cores.timer}
    assert os.sched_getaffinity(me) == before

    (tmp_path / "ref.py").write_text(COPY_REF)
    (tmp_path / "add.cpp").write_text(COPY_KERNEL)
    ref = parse_reference(f"{tmp_path / 'ref.py'}:f", f"{tmp_path / 'ref.py'}:get_inputs")
    with Oracle(ref, CheckConfig(time_budget=0.05), tmp_path) as o:
        v = o.check([CandidateSpec.from_path(tmp_path / "add.cpp")])[0]
        assert v.status in ("faster", "not_faster", "slower"), v.reasons
        assert o.cores == cores and o.threads == len(cores.servers)
        servers = []
        for zygote in (o.zygote, o.ref_zygote):
            assert zygote is not None and zygote.proc is not None
            for pid in descendants(zygote.proc.pid):
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() != "bwrap":  # the sandbox's own launcher waits
                        servers += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
                except OSError:
                    continue
        assert servers
        assert {frozenset(os.sched_getaffinity(t)) for t in servers} == {frozenset(cores.servers)}
    assert os.sched_getaffinity(me) == before


def test_a_reply_to_a_worker_that_died_is_a_crash_not_an_error() -> None:
    """A worker that exits between sending its outputs and reading the reply: the reply finds a
    closed pipe. That is the candidate's crash (judged, the batch goes on), not a BrokenPipeError
    that ended a whole batch with no verdicts (seen once in a full run, hostile candidates)."""
    import multiprocessing
    import time as _time

    from pytest_maxcode.oracle.pool import ChildGone, Job

    ours, theirs = multiprocessing.Pipe()
    theirs.close()
    job = Job(None, 1, 0, ours, None, _time.monotonic() + 5, 1 << 20, stage="input set 0")  # type: ignore[arg-type]
    with pytest.raises(ChildGone, match="input set 0"):
        for _ in range(64):  # the first writes may still fit the pipe's buffer
            job.send("ok", padding="x" * 4096)


ATTACKS = Path(__file__).parent / "data" / "attacks"


def test_no_candidate_instruction_runs_before_its_clock_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thaw wakes the sandbox's threads one by one, and a candidate that starts on its inputs
    the moment it is thawed (c21: 200 idle threads to make the thaw long, a serve loop that does
    not wait for the bell) must still find its clock running: every wake it notes, by the same
    clock, is inside the interval of the call it served. (With the clock read after the thaw, c21
    woke 0.3 to 3.7 ms before its clock in 4 of about 100 rounds on the 2-core VM.)"""
    from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
    from pytest_maxcode.oracle.reference import parse_reference

    shutil.copy(ATTACKS / "ref.py", tmp_path / "ref.py")
    shutil.copy(ATTACKS / "c21_thaw_race.cpp", tmp_path / "c21.cpp")
    calls: list[tuple[int, int]] = []
    wakes: list[int] = []
    real_timed, real_workload = timing._Side.timed, timing.time_workload

    def timed(self: timing._Side, *args: Any, **kwargs: Any) -> Any:
        out = real_timed(self, *args, **kwargs)
        if self.name == "candidate":
            calls.append((self.started, self.started + out[0]))
        return out

    def workload(*args: Any, **kwargs: Any) -> timing.WorkloadTiming:
        try:
            return real_workload(*args, **kwargs)
        finally:
            # the job's own folder (a fresh one under the sandbox's, for the job's lifetime)
            for notes in Path(o.zygote.job_dir).glob("maxcode-job-*/c21_wakes"):  # type: ignore[union-attr, arg-type]
                wakes.extend(int(line) for line in notes.read_text().split())
                notes.unlink()

    monkeypatch.setattr(timing._Side, "timed", timed)
    monkeypatch.setattr(timing, "time_workload", workload)
    ref = parse_reference(str(tmp_path / "ref.py"))
    with Oracle(ref, CheckConfig(time_budget=0.3, timeout=60), tmp_path) as o:
        v = o.check([CandidateSpec.from_path(tmp_path / "c21.cpp")])[0]
    assert v.status != "faster", v.reasons
    assert len(wakes) >= 20, (v.status, v.reasons)  # it was timed, its patch in force
    starts = [a for a, _ in calls]
    early = []
    for woke in wakes:
        i = bisect.bisect_right(starts, woke) - 1
        if i < 0 or woke > calls[i][1]:
            early.append(starts[min(i + 1, len(starts) - 1)] - woke)
    assert not early, f"{len(early)} of {len(wakes)} wakes before their clock started (ns before: {sorted(early)[:5]})"


def _until(ready: Any, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def test_the_keeper_spins_at_idle_policy_on_its_core() -> None:
    """The keeper only takes a core nothing else wants: at SCHED_IDLE any thread of the
    sandbox's (or the reference's) preempts it at once."""
    from pytest_maxcode.oracle import keeper

    cpu = min(os.sched_getaffinity(0))
    k = keeper.Keeper(cpu)
    try:
        assert k.proc is not None
        assert _until(lambda: os.sched_getscheduler(k.proc.pid) == os.SCHED_IDLE)  # type: ignore[union-attr]
        assert os.sched_getaffinity(k.proc.pid) == {cpu}
    finally:
        k.stop()
    assert not k.alive


@needs_freezer
def test_the_keeper_starts_the_clock_before_it_thaws_and_a_passed_over_keeper_never_thaws() -> None:
    """The keeper's clock reading comes before the sandbox runs again; a keeper that cannot take
    its round in time is passed over (the timer thaws), and when it runs again later it thaws
    nothing: the sandbox, frozen again meanwhile, stays frozen."""
    from pytest_maxcode.oracle import keeper

    cg = isolation.Cgroups.make(isolation.Limits(memory=None, pids=None, freezable=True))
    folder = cg.folders["freezer"]
    proc = subprocess.Popen(["/bin/sh", "-c", f"echo $$ > {folder / 'cgroup.procs'}; exec sleep 600"], start_new_session=True)
    state = cg.freezer_state()
    assert state is not None
    frozen_text = "frozen 1" if state[0].endswith("cgroup.freeze") else "FROZEN"
    events = folder / ("cgroup.events" if state[0].endswith("cgroup.freeze") else "freezer.state")
    thaws: list[int] = []

    def thawer() -> Any:
        thaw = cg.thaw_call()
        assert thaw is not None

        def by_timer() -> None:
            thaws.append(time.perf_counter_ns())
            thaw()

        return by_timer

    def frozen() -> bool:
        return frozen_text in events.read_text().splitlines()

    k = keeper.Keeper(min(os.sched_getaffinity(0)))
    try:
        assert _until(lambda: str(proc.pid) in (folder / "cgroup.procs").read_text().split())
        assert cg.freeze(True) and frozen()
        asked = time.perf_counter_ns()
        start = k.thaw_by(state, thawer)
        t0 = start()
        start.finish(True)
        assert asked <= t0 <= time.perf_counter_ns()
        assert _until(lambda: not frozen())
        assert k.took + k.passed == 1 and len(thaws) == k.passed  # under load it may be passed over

        assert _until(lambda: k.words[keeper.LEFT] == k.token)  # it left that round
        assert cg.freeze(True)
        os.kill(k.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        start = k.thaw_by(state, thawer)
        passed = k.passed
        start()
        start.finish(True)
        assert k.passed == passed + 1 and _until(lambda: not frozen())
        assert cg.freeze(True)
        os.kill(k.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        assert _until(lambda: k.words[keeper.LEFT] == k.token)  # it ran, and left the round it missed
        time.sleep(0.1)
        assert frozen() and k.alive
    finally:
        k.stop()
        cg.cleanup()
        proc.wait(timeout=30)
