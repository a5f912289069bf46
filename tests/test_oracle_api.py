"""The oracle as the search uses it: one warm Oracle, several batches."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from pytest_maxcode.oracle import probe
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.sandbox.stop import tree


def _worker_inside(pid: int) -> int:
    """The worker's Python process under ``pid`` (the sandbox's process, or the worker itself)."""
    for p in tree(pid):  # nearest first
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] == os.fsencode(sys.executable) and any(a.endswith(b"_maxcode_worker.py") for a in argv):
            return p
    raise AssertionError(f"no worker under {pid}")


@pytest.mark.parametrize("how", ["sandbox-killed", "worker-killed"])
def test_a_dead_worker_is_replaced_between_batches(project: Path, how: str) -> None:
    # worker-killed, as a candidate can kill the process that forked it: its sandbox outlives it
    # by a moment, so it looked alive when the next job was sent, and the job's fork request met
    # a closed socket (the attack batch once ended with "the worker did not fork a job (dead)")
    os.chdir(project)
    config = CheckConfig(time_budget=0.1, timeout=30)
    with Oracle(parse_reference("ref.py"), config, project) as oracle:
        scratch = oracle.scratch
        (first,) = oracle.check([CandidateSpec.from_path("good.cpp")])
        assert first.correct
        if how == "sandbox-killed":
            os.killpg(oracle.zygote.proc.pid, signal.SIGKILL)
            oracle.zygote.proc.wait()
        else:  # its sandbox held, as in the moment before it notices
            os.kill(oracle.zygote.proc.pid, signal.SIGSTOP)
            os.kill(_worker_inside(oracle.zygote.proc.pid), signal.SIGKILL)
        second, wrong = oracle.check([CandidateSpec.from_path("good.cpp"), CandidateSpec.from_path("cheats/zeros.cpp")])
        assert second.correct, second.reasons
        assert wrong.status == "wrong"
    assert scratch is not None and not scratch.exists()  # nothing left on disk


def test_expected_outputs_never_reach_the_disk_a_candidate_can_read(project: Path) -> None:
    os.chdir(project)
    with Oracle(parse_reference("ref.py"), CheckConfig(time_budget=0.1), project) as oracle:
        assert oracle.scratch is not None
        files = [p.relative_to(oracle.scratch).as_posix() for p in oracle.scratch.rglob("*") if p.is_file()]
        # the inputs sit outside the worker's writable job folder: a candidate cannot rewrite them
        assert files == ["inputs.pt"]
        assert oracle.workloads[0].expected


def test_a_gpu_verdict_names_the_copy_its_timed_calls_include_once_whatever_rebuilt_its_reasons() -> None:
    from pytest_maxcode.oracle.check import _note_host_copy
    from pytest_maxcode.oracle.verdict import Verdict

    v = Verdict(candidate="k.cu", status="faster", speedup=2.0, speedup_ci=[1.8, 2.2], reasons=["2x, 95% CI [1.8, 2.2] clears 1.05"],
                diagnostics={"host_copy_bytes_per_call": 64 << 20})
    _note_host_copy(v)
    _note_host_copy(v)
    assert v.reasons[1:] == ["each timed call includes copying its 64 MiB of results to the host (docs: the oracle, "
                             "'On a GPU'): a kernel much shorter than that copy shows a speedup closer to 1 than its own"]
    cpu = Verdict(candidate="k.cpp", status="faster", speedup=2.0, speedup_ci=[1.8, 2.2], reasons=["r"])
    _note_host_copy(cpu)
    assert cpu.reasons == ["r"]


def test_the_scratch_of_a_killed_run_is_swept_and_no_other(tmp_path: Path) -> None:
    import subprocess

    from pytest_maxcode.oracle.check import SCRATCH_IDLE_S, SCRATCH_PREFIX, sweep_scratch

    gone = subprocess.Popen(["true"])
    gone.wait()
    now = time.time()
    folders = {
        "killed long ago": tmp_path / f"{SCRATCH_PREFIX}{gone.pid}-a1",
        "killed just now": tmp_path / f"{SCRATCH_PREFIX}{gone.pid}-b2",
        "running": tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-c3",
        "someone else's": tmp_path / "maxcode-oracle-notapid",
    }
    for folder in folders.values():
        (folder / "job").mkdir(parents=True)
        (folder / "inputs.pt").write_bytes(b"x" * 1024)
    for name in ("killed long ago", "running", "someone else's"):
        old = now - 2 * SCRATCH_IDLE_S
        for path in (folders[name], folders[name] / "job", folders[name] / "inputs.pt"):
            os.utime(path, (old, old))
    assert sweep_scratch(tmp_path, now) == [folders["killed long ago"]]
    assert [name for name, folder in folders.items() if folder.exists()] == ["killed just now", "running", "someone else's"]


COMPILED = '''
import sys

import torch

with open({mark!r}, "a") as f:  # what this job's process had loaded and settled before the candidate compiled
    isa = sys.modules.get("torch._inductor.cpu_vec_isa")
    settled = isa is not None and isa.valid_vec_isa_list.cache_info().currsize == 1
    skip = sys.modules["torch._inductor.config"].cpp.vec_isa_ok if "torch._inductor.config" in sys.modules else "unloaded"
    f.write(f"{{'torch._dynamo' in sys.modules}} {{settled}} {{skip}}\\n")


@torch.compile(backend="eager")
def _chain(x, bias):
    y = torch.relu(x * 2.0 + bias)
    return y * y - 0.5


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        return _chain(x, bias)
'''


def test_compiling_candidates_find_the_compiler_loaded(project: Path) -> None:
    """Each job of a candidate (its screening, each further block) is a fresh child of the
    zygote: the zygote loads torch.compile's machinery once, when the first candidate that
    calls it arrives, and every job from then on inherits it instead of importing it again,
    with Inductor's probe of the CPU settled (skipped where the machine's cached answer says
    every listed instruction set passes it)."""
    os.chdir(project)
    mark = project / "loaded.txt"
    for name in ("compiled.py", "compiled_too.py"):
        (project / name).write_text(COMPILED.format(mark=str(mark)))
    # no sandbox: the candidates write their marks where this test reads them
    with Oracle(parse_reference("ref.py"), CheckConfig(time_budget=0.05, timeout=120, sandbox="none"), project) as oracle:
        verdicts = oracle.check([CandidateSpec.from_path("compiled.py"), CandidateSpec.from_path("compiled_too.py")])
    assert all(v.correct for v in verdicts), [v.reasons for v in verdicts]
    seen = mark.read_text().splitlines()
    skipped = probe.vector_isa_ok(probe.cache_dir())  # cached by the oracle's first compiled candidate
    assert len(seen) >= 2 and set(seen) == {f"True True {True if skipped else None}"}, seen
