"""Every known way to fool a kernel harness, checked in one batch: none is called correct.

One ``maxcode check`` call evaluates all of them (the batch path the search uses), so
this also shows the harness surviving each in turn, with the next candidate unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CliResult, run_maxcode

SECRETS = {"ANTHROPIC_API_KEY": "sk-test-anthropic", "GITHUB_TOKEN": "ghp_test", "MY_SERVICE_SECRET": "sk-test-x"}

# candidate file -> (statuses it may get, a phrase its first reason must contain)
EXPECTED: dict[str, tuple[set[str], str]] = {
    "unwritten.cpp": ({"wrong"}, "got nan"),
    "zeros.cpp": ({"wrong"}, "elements wrong"),
    "partial.cpp": ({"wrong"}, "50%"),
    "mutate_input.cpp": ({"rejected"}, "modified input 0"),
    "replay.cpp": ({"wrong"}, "input set 1"),
    "ptr_cache.cpp": ({"wrong"}, "input set 1"),
    "detached_thread.cpp": ({"rejected", "wrong"}, ""),
    "infinite_loop.cpp": ({"timeout"}, "did not finish within 5 s"),
    "segfault.cpp": ({"crash"}, "SIGSEGV"),
    "abort.cpp": ({"crash"}, "SIGABRT"),
    "exit_zero.cpp": ({"crash"}, "exited with status 0"),
    "child_process.cpp": ({"rejected"}, "process"),
    "flood_stdout.cpp": ({"rejected"}, "bytes to stdout/stderr"),
    "big_alloc.cpp": ({"crash", "runtime_error"}, ""),
    "nonzero_rc.cpp": ({"runtime_error"}, "returned 3"),
    "no_entry.cpp": ({"compile_error"}, "maxcode_run"),
    "patch_perf_counter.py": ({"rejected"}, "time.perf_counter"),
    "patch_cuda_sync.py": ({"rejected"}, "torch.cuda.synchronize"),
    "compat_raises.py": ({"runtime_error"}, "not finished"),
}


@pytest.fixture(scope="module")
def batch(module_project: Path) -> CliResult:
    cheats = sorted(str(p.relative_to(module_project)) for p in (module_project / "cheats").iterdir())
    args = ["check", "ref.py", "good.cpp", *cheats, "env_probe.cpp", "good.cpp"]
    (module_project / "env_probe.cpp").write_text((module_project / "cheats" / "env_secrets.cpp").read_text())
    return run_maxcode(
        [*args, "--json", "--timeout", "5", "--max-memory", "1G", "--time-budget", "0.1"],
        cwd=module_project,
        env=SECRETS,
    )


def test_batch_reports_every_candidate_in_order(batch: CliResult) -> None:
    assert batch.returncode == 1, batch.stderr
    names = [Path(v["candidate"]).name for v in batch.verdicts]
    assert names[0] == "good.cpp" and names[-1] == "good.cpp"
    assert set(EXPECTED) <= set(names)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cheat_is_never_called_correct(batch: CliResult, name: str) -> None:
    verdict = batch.by_name()[name]
    statuses, phrase = EXPECTED[name]
    assert verdict["status"] in statuses, verdict
    assert verdict["status"] not in ("faster", "not_faster")
    assert verdict["speedup"] is None
    assert phrase in verdict["reasons"][0]


def test_harness_survives_and_next_candidate_is_unaffected(batch: CliResult) -> None:
    # the same correct kernel, first and last in the batch, after every crash and hang
    first, last = batch.verdicts[0], batch.verdicts[-1]
    for v in (first, last):
        assert v["status"] in ("faster", "not_faster"), v
        assert v["speedup"] > 0 and v["speedup_ci"][0] <= v["speedup"] <= v["speedup_ci"][1]


def test_candidate_finds_no_secret_in_its_environment(batch: CliResult) -> None:
    # env_probe writes zeros (and so is wrong) if any KEY/TOKEN/SECRET variable is visible
    assert batch.by_name()["env_probe.cpp"]["status"] in ("faster", "not_faster")


def test_no_process_is_left_behind(batch: CliResult) -> None:
    import subprocess

    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "_maxcode_worker.py" not in out


def test_output_is_capped_in_diagnostics(batch: CliResult) -> None:
    v = batch.by_name()["flood_stdout.cpp"]
    assert v["diagnostics"]["output_bytes"] > 1_000_000
    assert len(v["diagnostics"]["output"]) <= 4000
