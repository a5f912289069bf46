"""``maxcode check`` as a user runs it: verdicts, exit statuses, errors, the store."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, cuda_available, run_maxcode

FAST = ["--time-budget", "0.1", "--timeout", "30"]
REQUIRED = {
    "candidate", "status", "speedup", "speedup_ci", "reference_s", "candidate_s",
    "compile_s", "eval_s", "weak_check", "reasons", "diagnostics",
}


def test_correct_candidate_json_and_exit_zero(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "good.cpp", "--json", *FAST], cwd=project)
    assert r.returncode == 0, r.stderr
    (v,) = r.verdicts
    assert REQUIRED <= set(v)
    assert v["status"] in ("faster", "not_faster")
    low, high = v["speedup_ci"]
    assert low <= v["speedup"] <= high
    assert v["reference_s"] > 0 and v["candidate_s"] > 0 and v["compile_s"] > 0 and v["eval_s"] > 0
    assert v["weak_check"] is False
    w = v["diagnostics"]["workloads"]["default"]
    assert w["rounds"] >= 15
    assert 0 < w["bandwidth_fraction"]
    assert w["bytes_per_call"] == (64 * 1024 + 1024 + 64 * 1024) * 4
    assert v["diagnostics"]["remeasure"] == {"command": f"maxcode check ref.py good.cpp --json {' '.join(FAST)} --repeat 5",
                                             "expect": [low, high]}


def test_wrong_candidate_exits_one_with_mismatch_summary(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "good.cpp", "cheats/partial.cpp", "--json", *FAST], cwd=project)
    assert r.returncode == 1
    good, bad = r.verdicts
    assert good["status"] in ("faster", "not_faster")
    assert bad["status"] == "wrong"
    mm = bad["diagnostics"]["mismatch"]
    assert mm["fraction_wrong"] == pytest.approx(0.5)
    assert mm["first_bad_index"] == [32, 0]


def test_human_output(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "good.cpp", "broken.cpp", *FAST], cwd=project)
    assert r.returncode == 1
    assert "compile_error" in r.stdout and "broken.cpp:2" in r.stdout
    assert "good.cpp" in r.stdout
    # a correct candidate's quoted interval comes with the command that measures it again
    assert re.search(r"good\.cpp: each repeat should land in \[\d+\.\d\d, \d+\.\d\d\]:\n"
                     r"  maxcode check ref\.py good\.cpp --time-budget 0\.1 --timeout 30 --repeat 5\n", r.stdout), r.stdout


def test_function_reference_with_scalar_and_inputs_option(tmp_path: Path) -> None:
    shutil.copytree(DATA / "scale", tmp_path / "p")
    r = run_maxcode(
        ["check", "ops.py:scale_add", "scale_add.cpp", "--inputs", "ops.py:make_inputs", "--json", *FAST],
        cwd=tmp_path / "p",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.verdicts[0]["status"] in ("faster", "not_faster")


def test_module_parameters_follow_the_arguments(tmp_path: Path) -> None:
    shutil.copytree(DATA / "linear", tmp_path / "p")
    r = run_maxcode(["check", "ref.py", "linear.cpp", "--json", *FAST], cwd=tmp_path / "p")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.verdicts[0]["status"] in ("faster", "not_faster")


def test_weak_check_is_flagged(tmp_path: Path) -> None:
    shutil.copytree(DATA / "scale", tmp_path / "p")
    r = run_maxcode(
        ["check", "ops.py:all_zero", "zeros.cpp", "--inputs", "ops.py:make_inputs", "--json", *FAST],
        cwd=tmp_path / "p",
    )
    (v,) = r.verdicts
    assert v["status"] in ("faster", "not_faster")
    assert v["weak_check"] is True
    assert any("all-zeros" in reason for reason in v["reasons"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "missing.py", "good.cpp"], "reference missing.py: no such file"),
        (["check", "ref.py", "nope.cpp"], "candidate nope.cpp: no such file"),
        (["check", "ref.py", "README.txt"], "expected a .cpp, .cu (native) or .py"),
        (["check", "ref.py:Nothing", "good.cpp"], "defines no Nothing"),
        (["check", "ref.py", "good.cpp", "--seeds", "1"], "--seeds"),
        (["check", "ref.py", "good.cpp", "--min-speedup", "-1"], "must be greater than 0"),
        (["check", "ref.py", "good.cpp", "--max-memory", "lots"], "is not a size"),
        (["check", "ref.py"], "the following arguments are required"),
    ],
)
def test_usage_errors_are_one_line_exit_two(project: Path, args: list[str], message: str) -> None:
    (project / "README.txt").write_text("not a candidate")
    r = run_maxcode(args, cwd=project)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("maxcode: error:") and message in lines[0]
    assert "Traceback" not in r.stderr


def test_broken_reference_is_exit_two_with_its_error(tmp_path: Path) -> None:
    shutil.copytree(DATA / "scale", tmp_path / "p")
    r = run_maxcode(
        ["check", "ops.py:explode", "scale_add.cpp", "--inputs", "ops.py:make_inputs"], cwd=tmp_path / "p"
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "maxcode: error: reference ops.py: failed: RuntimeError: the reference is broken"
    )


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU path")
def test_cuda_candidates_compile_without_a_gpu(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "chain.cu", "broken.cu", "--json", *FAST], cwd=project)
    assert r.returncode == 1
    ok, bad = r.verdicts
    assert ok["status"] == "runtime_error" and "cannot run without a CUDA device" in ok["reasons"][0]
    assert ok["compile_s"] > 0
    assert bad["status"] == "compile_error"
    assert "broken.cu" in bad["reasons"][0] and "not_declared_anywhere" in bad["reasons"][0]
    r = run_maxcode(["check", "ref.py", "chain.cu", "--device", "cuda"], cwd=project)
    assert r.returncode == 2 and "no CUDA device" in r.stderr


def test_cuda_cheats_compile_without_a_gpu(tmp_path: Path) -> None:
    """The GPU cheats below are real CUDA: they build with nvcc here, so on a GPU they run."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    from pytest_maxcode.native import build

    sources = [build.Source(DATA / "chain" / "gpu_cheats" / name, "cuda") for name in GPU_CHEATS]
    results = build.build_all(sources, tmp_path / "cache")
    assert all(r.ok for r in results), [r.errors for r in results]


# beside, not in, cheats/: a .cu file in a batch makes maxcode check pick the GPU, and the CPU
# cheats' batches (test_oracle_adversarial, test_ray_executor) must stay on the CPU everywhere
GPU_CHEATS = ("side_stream.cu", "stale_device_result.cu")


@pytest.mark.gpu
def test_cuda_candidate_and_cheats_on_gpu(project: Path) -> None:
    cheats = ["cheats/patch_cuda_sync.py", *(f"gpu_cheats/{name}" for name in GPU_CHEATS)]
    r = run_maxcode(["check", "ref.py", "chain.cu", *cheats, "--json", *FAST], cwd=project)
    cu, sync, side, stale = r.verdicts
    assert cu["status"] in ("faster", "not_faster"), cu
    assert cu["diagnostics"]["device"] == "cuda"
    assert sync["status"] == "rejected"
    # its 64 passes on a stream of its own are inside the timed interval: correct, and slower
    assert side["status"] == "not_faster" and side["speedup_ci"][1] < 1, side
    assert stale["status"] == "wrong", stale


def test_every_evaluation_lands_in_the_store(project: Path) -> None:
    r = run_maxcode(["check", "ref.py", "good.cpp", "cheats/zeros.cpp", "--json", *FAST], cwd=project)
    db = sqlite3.connect(project / ".maxcode" / "maxcode.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = db.execute(
        "SELECT e.status, e.speedup, c.source, e.target_id FROM evaluations e JOIN candidates c ON c.hash = e.candidate_hash ORDER BY e.id"
    ).fetchall()
    assert [row[0] for row in rows] == [v["status"] for v in r.verdicts]
    assert rows[0][2] == (project / "good.cpp").read_text()
    assert rows[0][3] == "ref.Model"
    assert db.execute("SELECT finished_at IS NOT NULL FROM runs").fetchone()[0] == 1


def test_killed_run_leaves_a_consistent_store_and_no_processes(project: Path) -> None:
    cands = ["good.cpp", "cheats/zeros.cpp", "cheats/infinite_loop.cpp", "cheats/infinite_loop.cpp"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py", *cands, "--json", "--time-budget", "0.1", "--timeout", "120"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db_path = project / ".maxcode" / "maxcode.db"
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline and done < 2:
        time.sleep(0.2)
        if db_path.exists():
            try:
                done = sqlite3.connect(db_path).execute("SELECT count(*) FROM evaluations").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    assert done == 2
    time.sleep(0.5)  # the infinite loop is running now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    statuses = [row[0] for row in db.execute("SELECT status FROM evaluations ORDER BY id")]
    assert statuses[1] == "wrong" and len(statuses) == 2
    assert db.execute("SELECT finished_at FROM runs").fetchone()[0] is None
    # the worker and the hung kernel die with the parent
    for _ in range(50):
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if "_maxcode_worker.py" not in ps:
            break
        time.sleep(0.1)
    assert "_maxcode_worker.py" not in ps
    # and the next run works on the same store
    r = run_maxcode(["check", "ref.py", "good.cpp", "--json", *FAST], cwd=project)
    assert r.returncode == 0
    assert db.execute("SELECT count(*) FROM evaluations").fetchone()[0] == 3


def test_inplace_reference_compares_the_arguments_after_the_call(tmp_path: Path) -> None:
    shutil.copytree(DATA / "inplace", tmp_path / "p")
    r = run_maxcode(
        ["check", "ops.py:scale_", "scale.cpp", "noop.cpp", "--inputs", "ops.py:make_scale", "--inplace", "--json", *FAST],
        cwd=tmp_path / "p",
    )
    good, noop = r.verdicts
    assert good["status"] in ("faster", "not_faster"), good["reasons"]
    assert noop["status"] == "wrong"
    r = run_maxcode(
        ["check", "ops.py:clamp_both_", "clamp_one.cpp", "--inputs", "ops.py:make_pair", "--inplace", "--json", *FAST],
        cwd=tmp_path / "p",
    )
    (v,) = r.verdicts
    assert v["status"] == "wrong" and "output 1" in v["reasons"][0]  # the second argument was not clamped


MATMUL = '''
import torch


class Model(torch.nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(128, 256), torch.randn(256, 64)]


def get_init_inputs():
    return []
'''


def test_a_compute_bound_reference_gets_its_flops_and_the_machines_gemm_roof(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(MATMUL)
    (tmp_path / "same.py").write_text("from ref import Model as ModelNew  # noqa: F401\n")
    r = run_maxcode(["check", "ref.py", "same.py", "--json", "--time-budget", "0.1"], cwd=tmp_path,
                    env={"MAXCODE_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    (v,) = r.verdicts
    d = v["diagnostics"]
    (w,) = d["workloads"].values()
    assert w["flops_per_call"] == 2 * 128 * 256 * 64  # the matmul; relu is elementwise and counts 0
    assert w["achieved_flops_per_s"] == pytest.approx(w["flops_per_call"] / w["candidate"]["median_s"])
    assert w["flops_fraction"] == pytest.approx(w["achieved_flops_per_s"] / d["machine_flops_per_s"])
    cached = json.loads(next((tmp_path / "cache" / "machine").glob("cpu-*-flops_per_s.json")).read_text())
    assert cached["flops_per_s"] == d["machine_flops_per_s"] > 1e8
