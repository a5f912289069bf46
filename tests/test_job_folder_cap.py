"""The job folder's total is capped (issue 13): RLIMIT_FSIZE caps each file a candidate writes,
not their sum, and the job folder lies on the host's disk. A watch outside the sandbox kills it
the first time the folder passes ``max_job_bytes``; the candidate is rejected with what it
wrote, its files are removed, and the candidate after it starts with an empty folder. The
compilers' folders are held to the same cap: a source whose build writes more fails alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.native import build
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import CORRECT
from pytest_maxcode.sandbox import disk
from pytest_maxcode.sandbox.isolation import resolve, works

MiB = 1 << 20
no_namespaces = pytest.mark.skipif(works("bwrap") is not None and works("unshare") is not None, reason="no namespaces here")


def test_usage_counts_the_blocks_of_every_file_below_and_not_links_or_holes(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"x" * MiB)
    (tmp_path / "a" / "b" / "two").write_bytes(b"y" * (2 * MiB))
    with open(tmp_path / "sparse", "wb") as f:  # 1 GiB long, one block written
        f.seek(1 << 30)
        f.write(b"z")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"w" * (8 * MiB))
    os.symlink(outside, tmp_path / "link")
    used = disk.usage([tmp_path])
    assert used is not None and 3 * MiB <= used < 3 * MiB + MiB
    assert disk.over([tmp_path], 4 * MiB) is None
    why = disk.over([tmp_path], 2 * MiB)
    assert why is not None and why.startswith("wrote 3 MiB to its job folder (the cap is 2 MiB")
    shutil.rmtree(outside)


def test_more_entries_than_can_be_summed_in_time_are_over_the_cap(tmp_path: Path) -> None:
    for k in range(20):
        (tmp_path / f"f{k}").touch()
    assert disk.usage([tmp_path], max_entries=10) is None
    assert disk.usage([tmp_path], max_entries=100) == 0


def test_the_watch_kills_the_process_group_once_the_folder_passes_the_cap(tmp_path: Path) -> None:
    import subprocess
    import sys

    writer = subprocess.Popen([sys.executable, "-c", "import time, os\n"
                               "for k in range(400):\n"
                               f"    open(os.path.join({str(tmp_path)!r}, f'f{{k}}'), 'wb').write(b'x' * (1 << 20)); time.sleep(0.01)\n"],
                              start_new_session=True)
    watch = disk.FolderWatch([tmp_path], 16 * MiB, writer.pid)
    writer.wait(timeout=60)
    why = watch.stop()
    assert writer.returncode == -9 and why is not None and "the cap is 16 MiB" in why
    assert disk.usage([tmp_path]) < 64 * MiB  # stopped near the cap, not after 400 MiB


@no_namespaces
def test_a_candidate_that_fills_its_job_folder_is_rejected_and_its_neighbour_is_judged(tmp_path: Path) -> None:
    shutil.copy(DATA / "attacks" / "ref.py", tmp_path / "ref.py")
    for name in ("filler.cpp", "build_filler.cpp"):
        shutil.copy(DATA / "job_cap" / name, tmp_path / name)
    shutil.copy(DATA / "attacks" / "honest.cpp", tmp_path / "honest.cpp")
    config = CheckConfig(time_budget=0.1, timeout=60, max_job_bytes=64 * MiB)
    cands = [CandidateSpec.from_path(tmp_path / n) for n in ("filler.cpp", "build_filler.cpp", "honest.cpp")]
    with Oracle(parse_reference(str(tmp_path / "ref.py")), config, tmp_path) as oracle:
        filler, build_filler, honest = oracle.check(cands)
        job_dir = oracle.zygote.job_dir
        assert job_dir is not None and disk.usage([job_dir]) < 64 * MiB
    assert filler.status == "rejected", (filler.status, filler.reasons)
    assert "to its job folder (the cap is 64 MiB" in filler.reasons[0]
    # the oracle holds its compilers to the same cap
    assert build_filler.status == "compile_error", (build_filler.status, build_filler.reasons)
    assert build_filler.reasons[0].startswith("the build was stopped: its compiler wrote ")
    assert honest.status in CORRECT, (honest.status, honest.reasons)


def test_runs_that_take_turns_are_each_watched_from_their_own_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    watches = disk.RunWatches(16 * MiB)
    try:
        for _ in range(3):  # short runs whose start and end reach the watch together
            quick = subprocess.Popen(["true"], start_new_session=True)
            watches.aim(tmp_path, quick.pid)
            quick.wait()
            assert watches.disarm(tmp_path) is None
        writer = subprocess.Popen([sys.executable, "-c", "import time, os\n"
                                   "for k in range(400):\n"
                                   f"    open(os.path.join({str(tmp_path)!r}, f'f{{k}}'), 'wb').write(b'x' * (1 << 20)); time.sleep(0.01)\n"],
                                  start_new_session=True)
        watches.aim(tmp_path, writer.pid)
        writer.wait(timeout=60)
        why = watches.disarm(tmp_path)
    finally:
        watches.close()
    assert writer.returncode == -9 and why is not None and "the cap is 16 MiB" in why


@no_namespaces
def test_a_source_whose_build_fills_the_compilers_folder_fails_alone(tmp_path: Path) -> None:
    sources = [build.Source(DATA / "job_cap" / "build_filler.cpp", "cpp"), build.Source(DATA / "attacks" / "honest.cpp", "cpp")]
    filler, honest = build.build_all(sources, tmp_path / "cache", isolation=resolve("auto"), max_bytes=64 * MiB)
    assert not filler.ok and filler.library is None
    assert filler.errors[0].startswith("the build was stopped: its compiler wrote "), filler.errors
    assert "(the cap is 64 MiB for all its files together)" in filler.errors[0]
    assert honest.ok, honest.errors  # built again alone once the batch was stopped
    assert disk.usage([tmp_path / "cache"]) < 64 * MiB  # nothing of the filler's is left
    # without the cap the same source builds: it is the total that stopped it, not the source
    unlimited = build.build_all(sources[:1], tmp_path / "free", isolation=resolve("auto"))[0]
    assert unlimited.ok and unlimited.library is not None and unlimited.library.stat().st_size > 256 * MiB


@no_namespaces
def test_nothing_a_candidate_leaves_in_the_worker_is_seen_by_the_next(tmp_path: Path) -> None:
    shutil.copy(DATA / "attacks" / "ref.py", tmp_path / "ref.py")
    for name in ("writer.cpp", "reader.cpp"):
        shutil.copy(DATA / "stash" / name, tmp_path / name)
    cands = [CandidateSpec.from_path(tmp_path / n) for n in ("writer.cpp", "reader.cpp")]
    with Oracle(parse_reference(str(tmp_path / "ref.py")), CheckConfig(time_budget=0.05, timeout=60), tmp_path) as oracle:
        writer, reader = oracle.check(cands)
        job_dir = oracle.zygote.job_dir
        assert job_dir is not None and not (job_dir / "stash").exists()
    assert writer.status in CORRECT, (writer.status, writer.reasons)
    # the reader gives wrong results wherever it finds any of the writer's stash
    assert reader.status in CORRECT, (reader.status, reader.reasons, reader.diagnostics.get("output"))
    assert "found" not in reader.diagnostics.get("output", "")
