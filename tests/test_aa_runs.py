"""Numbers that reproduce (issue 14): the same candidate measured in separate runs, each with its
own seed, sandboxes, worker processes and buffers, gives speedups that every other run's interval
holds; beside a CPU hog, a run that claims "faster" still quotes an interval holding the quiet
speedup. Before the blocks, one process's interval knew only its own noise, and three runs of one
kernel measured 3.6x, 4.9x and 9.3x, each confident."""

from __future__ import annotations

import multiprocessing
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

RUNS = 10


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextmanager
def cpu_hog(processes: int = 2, work: Callable[[multiprocessing.synchronize.Event], None] = _spin) -> Iterator[None]:
    """Other work on the machine, as on a shared CI runner: one busy process per core
    (``work``: what each does until told to stop)."""
    stop = multiprocessing.get_context("fork").Event()
    procs = [multiprocessing.get_context("fork").Process(target=work, args=(stop,), daemon=True) for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()


def _runs(project: Path, n: int = RUNS) -> list[dict]:
    cand = CandidateSpec.from_path(project / "good.cpp")
    out = []
    for _ in range(n):  # a fresh oracle per run: new seed, new sandboxes, new processes
        with Oracle(parse_reference(str(project / "ref.py")), CheckConfig(time_budget=0.1, timeout=120), project) as oracle:
            out.append(oracle.check([cand])[0].to_json())
    return out


def _held(runs: list[dict]) -> list[int]:
    """For each run: how many of the other runs' intervals hold its point estimate."""
    return [sum(o["speedup_ci"][0] <= r["speedup"] <= o["speedup_ci"][1] for j, o in enumerate(runs) if j != i)
            for i, r in enumerate(runs)]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("aa_runs")
    for name in ("ref.py", "good.cpp"):
        shutil.copy(DATA / "chain" / name, root / name)
    return root


@pytest.fixture(scope="module")
def quiet(project: Path) -> list[dict]:
    return _runs(project)


def _table(runs: list[dict], held: list[int]) -> str:
    return "\n" + "\n".join(
        f"held by {h}: {r['speedup']}x {r['speedup_ci']} {r['status']}, blocks "
        f"{[(b['speedup'], b['busy'], b.get('pressure')) for b in r['diagnostics'].get('blocks', [])]}, set aside {r['diagnostics'].get('disturbed_rounds')}"
        for h, r in zip(held, runs))


def test_every_run_lies_inside_the_other_runs_intervals(quiet: list[dict]) -> None:
    # Issue 14's test. It failed now and then while the timer wrote each side's inputs from its
    # own core: every call then fetched them from the other core's cache, at a cost that
    # moved with the host (likely where it had put the two vCPUs; one run in about twenty at 1.9x to 2.2x
    # where the rest measured 2.7x to 3.3x). Written from the servers' core, 35 runs beside
    # 35 the old way (alternating) spread 0.043 against 0.065 (sd of the log) with no such run,
    # and five campaigns of ten passed
    assert all(r["status"] in ("faster", "not_faster") and r["speedup_ci"] for r in quiet), [r["reasons"] for r in quiet]
    held = _held(quiet)
    assert min(held) >= RUNS - 1, _table(quiet, held)


def test_beside_a_cpu_hog_each_run_lies_inside_the_others_intervals(project: Path) -> None:
    # Beside the hog whole runs differ more than the blocks of one run do (CI: six runs from
    # 2.69x to 4.07x, each run's blocks within 12%, intervals that excluded each other; later
    # three runs near 2.9x, then three near 2.1x): the blocks see the machine's CPU pressure and
    # the interval allows for the next run (issue 14). The rounds' disturbed share alone missed
    # it: runs whose blocks saw 0 to 12% of rounds disturbed quoted narrow intervals.
    # Issue 14's test as for the quiet machine: ten runs, each inside the nine others' intervals
    # (it was six runs with one miss allowed; on the 2-core Intel VM three campaigns of ten beside
    # two busy processes, 2026-11-28: 3.52x to 4.67x, every run loaded, intervals about [2.2, 7.4],
    # none missed), and no two "faster" claims exclude each other
    with cpu_hog():
        runs = _runs(project, RUNS)
    assert all(r["status"] in ("faster", "not_faster") and r["speedup_ci"] for r in runs), [r["reasons"] for r in runs]
    held = _held(runs)
    assert min(held) >= RUNS - 1, _table(runs, held)
    claims = [r for r in runs if r["status"] == "faster"]
    assert all(a["speedup_ci"][0] <= b["speedup_ci"][1] for a in claims for b in claims), _table(runs, held)
