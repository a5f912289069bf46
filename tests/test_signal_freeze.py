"""Freezing by signals, where no freezer cgroup can be written (issue 13): a stop that a chain of
forks outruns is never silent. Whatever of the tree ran while it was to be stopped is reported,
and through the oracle such a candidate is rejected while its honest neighbour is judged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import CORRECT
from pytest_maxcode.sandbox import isolation
from pytest_maxcode.sandbox.stop import SignalFreeze

#: a subreaper (as the sandbox's worker is, so orphans stay in its tree) whose child forks and
#: exits in a loop, a new pid each time, writing how far it got
OUTRUN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char** argv) {
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  if (fork() == 0) {
    for (unsigned long n = 1;; ++n) {
      if (fork() > 0) _exit(0);
      if (n % 64 == 0) { FILE* f = fopen(argv[1], "w"); if (f) { fprintf(f, "%lu", n); fclose(f); } }
    }
  }
  for (;;) if (wait(NULL) < 0) usleep(10000);
}
"""

#: threads and a child that spin: all of them stop at once, and resume
HONEST = """
import os, sys, threading, time
path = sys.argv[1]
def spin(name):
    n = 0
    while True:
        n += 1
        if n % 20000 == 0:  # replaced whole: a read never finds it half written
            with open(path + name + '.new', 'w') as f:
                f.write(str(n))
            os.replace(path + name + '.new', path + name)
threading.Thread(target=spin, args=('.thread',), daemon=True).start()
if os.fork() == 0:
    spin('.child')
time.sleep(600)
"""


def _wait_for(*paths: Path) -> None:
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, "the process tree did not start"
        time.sleep(0.02)


@contextmanager
def _tree(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def test_a_tree_that_stops_runs_nothing_until_resumed_and_nothing_is_reported(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    with _tree([sys.executable, "-c", HONEST, str(counter)]) as proc:
        _wait_for(Path(f"{counter}.thread"), Path(f"{counter}.child"))
        freeze = SignalFreeze(proc.pid)
        for _ in range(3):
            freeze.stop()
            seen = [Path(f"{counter}{s}").read_text() for s in (".thread", ".child")]
            time.sleep(0.3)
            assert [Path(f"{counter}{s}").read_text() for s in (".thread", ".child")] == seen
            freeze.resume()
            assert freeze.ran is None
            time.sleep(0.3)
            assert [Path(f"{counter}{s}").read_text() for s in (".thread", ".child")] != seen  # it runs again


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_chain_of_forks_that_outruns_the_stop_is_reported(tmp_path: Path) -> None:
    (tmp_path / "outrun.c").write_text(OUTRUN)
    subprocess.run(["cc", "-O2", "-o", str(tmp_path / "outrun"), str(tmp_path / "outrun.c")], check=True)
    outran = 0
    for trial in range(20):  # it outruns the stop in most tries; a try whose stop held is no failure
        counter = tmp_path / f"n{trial}"
        with _tree([str(tmp_path / "outrun"), str(counter)]) as proc:
            _wait_for(counter)
            freeze = SignalFreeze(proc.pid)
            freeze.stop()
            before = counter.read_text()
            time.sleep(0.3)
            moved = counter.read_text() != before
            freeze.resume()
        # whatever ran while it was to be stopped is said: never a silent escape
        assert not moved or (freeze.ran is not None and "process(es) started" in freeze.ran), (moved, freeze.ran)
        outran += moved
        if outran:
            break
    assert outran, "the chain never outran the stop: this test showed nothing"


@pytest.mark.skipif(isolation.works("bwrap") is not None and isolation.works("unshare") is not None,
                    reason="no namespaces here")
def test_without_a_freezer_a_candidate_that_outruns_the_stop_is_rejected(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # as on a machine where no freezer cgroup is writable: the oracle stops the sandbox by signals
    monkeypatch.setattr(isolation.Cgroups, "freeze", lambda self, frozen, **how: False)
    shutil.copy(DATA / "attacks" / "ref.py", tmp_path / "ref.py")
    shutil.copy(DATA / "stop" / "outrun_stop.cpp", tmp_path / "outrun_stop.cpp")
    shutil.copy(DATA / "attacks" / "honest.cpp", tmp_path / "honest.cpp")
    cands = [CandidateSpec.from_path(tmp_path / n) for n in ("outrun_stop.cpp", "honest.cpp")]
    with Oracle(parse_reference(str(tmp_path / "ref.py")), CheckConfig(time_budget=0.5, timeout=60), tmp_path) as oracle:
        attacker, honest = oracle.check(cands)
    assert attacker.status == "rejected", (attacker.status, attacker.reasons)
    assert attacker.reasons[0].startswith("its sandbox ran while it was to be stopped"), attacker.reasons
    assert honest.status in CORRECT, (honest.status, honest.reasons)


def test_a_leftover_process_adds_to_the_reason_that_rejected_a_candidate_first() -> None:
    # the helper that outran the stop was still there when the job ended: before, its
    # leftover replaced "its sandbox ran while it was to be stopped", the reason that mattered
    from types import SimpleNamespace

    from pytest_maxcode.oracle.check import Verdict

    output = SimpleNamespace(text=lambda: "", overflowed=False)
    child = SimpleNamespace(exit_code=0, output=output, overfilled=None, leftovers=3, stage="time default")
    ran = Verdict("outrun.cpp", "rejected", reasons=["its sandbox ran while it was to be stopped (...): 9 process(es) started"])
    Oracle._settle(SimpleNamespace(config=CheckConfig()), child, ran)  # type: ignore[arg-type]
    assert ran.status == "rejected"
    assert ran.reasons == ["its sandbox ran while it was to be stopped (...): 9 process(es) started",
                           "left 3 process(es) running after it returned"]
    passed = Verdict("k.cpp", "faster", reasons=["3x clears 1.05"])
    Oracle._settle(SimpleNamespace(config=CheckConfig()), child, passed)  # type: ignore[arg-type]
    assert passed.status == "rejected" and passed.reasons == ["left 3 process(es) running after it returned"]
