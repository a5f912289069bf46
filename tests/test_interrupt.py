"""Ctrl-C during ``pytest --maxcode``: one line, the report of what finished, the run marked
interrupted, exit 2; the same command then resumes from the stored evaluations."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_maxcode.options import MIN_SPEEDUP
from pytest_maxcode.search.loop import reusable

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def double(x):
    return x * 2.0


@maxcode.optimize(lang="cpp")
def slow(x, bias):
    """relu(2x + b), one row at a time."""
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        out[r] = torch.relu(x[r] * 2.0 + bias)
    return out
'''

TESTS = '''
import torch

from mylib import double, slow


def test_double():
    x = torch.randn(64, 64)
    torch.testing.assert_close(double(x), x * 2.0)


def test_slow():
    x, b = torch.randn(128, 256), torch.randn(256)
    torch.testing.assert_close(slow(x, b), torch.relu(2 * x + b))
'''

# eight configurations: a search long enough to be interrupted in the middle
SEED = '''// maxcode-tune: REPEAT=1,2,3,4,5,6,7,8
#include <dlpack/dlpack.h>
#include <cstdint>

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = (const float*)in[0].data;
  const float* b = (const float*)in[1].data;
  float* y = (float*)out[0].data;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int rep = 0; rep < REPEAT; ++rep)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float v = x[r * cols + c] * 2.0f + b[c];
        y[r * cols + c] = v < 0.f ? 0.f : v;
      }
  return 0;
}
'''

PYPROJECT = '''
[tool.maxcode]
budget = 8
k = 1
torch_compile = false

[tool.pytest.ini_options]
pythonpath = ["."]
'''


def evaluations(db: Path, target: str) -> int:
    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT count(*) FROM evaluations WHERE target_id=?", (target,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def decided(db: Path, target: str) -> int:
    """Stored evaluations a resumed run takes as they are: an undecided one (a busy machine
    widened its interval) is timed again, by design (``search.loop.reusable``)."""
    try:
        with sqlite3.connect(db) as con:
            rows = con.execute("SELECT status, ci_low, ci_high, diagnostics FROM evaluations WHERE target_id=?", (target,)).fetchall()
    except sqlite3.OperationalError:
        return 0
    return sum(reusable({"status": st, "ci_low": lo, "ci_high": hi, "diagnostics": json.loads(d)}, MIN_SPEEDUP, False)
               for st, lo, hi, d in rows)


def _ctrl_c_reaches_it() -> None:
    """The run under test takes Ctrl-C as a terminal delivers it, even when this suite was
    started where SIGINT is ignored (``nohup``, or ``&`` without job control), which a child
    would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_writes_what_finished_marks_the_run_and_resumes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mylib=LIB, test_lib=TESTS)
    (pytester.path / "pyproject.toml").write_text(PYPROJECT)
    seeds = pytester.path / "maxcode_kernels" / "seeds" / "mylib.slow"
    seeds.mkdir(parents=True)
    (seeds / "rows.cpp").write_text(SEED)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode"]
    # a session of its own, so the signal goes to the run's process group as a terminal's Ctrl-C does
    proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_ctrl_c_reaches_it)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    db = pytester.path / ".maxcode" / "maxcode.db"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None and decided(db, "mylib.slow") < 1:
        time.sleep(0.2)
    assert proc.poll() is None, "".join(lines)[-3000:]
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    proc.wait(timeout=120)
    stopped_in = time.monotonic() - sent
    reader.join(timeout=10)
    out = "".join(lines)
    lost = [line for line in out.splitlines() if "Exception ignored" in line or "Interrupt" in line]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, (lost, out[-3000:])
    print(f"stopped {stopped_in:.1f} s after SIGINT")
    assert stopped_in < 20, f"took {stopped_in:.1f} s to stop"
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-5000:]
    said = [line for line in out.splitlines() if line.startswith("maxcode: interrupted")]
    assert said == ["maxcode: interrupted; wrote the report of 1 finished target(s); resume with the same command"], out[-3000:]
    report = json.loads((pytester.path / ".maxcode" / "reports" / "report.json").read_text())
    assert [t["id"] for t in report["targets"]] == ["mylib.double"]
    with sqlite3.connect(db) as con:
        runs = con.execute("SELECT status, finished_at FROM runs").fetchall()
    assert len(runs) == 1 and runs[0][0] == "interrupted" and runs[0][1], runs
    stored = evaluations(db, "mylib.slow")
    assert 1 <= stored < 8, "the search finished before it was interrupted; nothing to resume"
    stored_decided = decided(db, "mylib.slow")

    # maxcode show lists the interrupted run's finished nodes
    show = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "show", "mylib.slow", "--json"], cwd=pytester.path,
                          capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert len(json.loads(show.stdout)) >= stored
    tree = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "show", "mylib.slow"], cwd=pytester.path,
                          capture_output=True, text=True)
    assert tree.returncode == 0 and "(run 1 interrupted)" in tree.stdout, tree.stdout + tree.stderr

    # the stored evaluations and one more: enough to see the resume, without the rest of the sweep
    again = subprocess.run(cmd + ["--maxcode-json=again.json", f"--maxcode-budget={stored + 1}"], cwd=pytester.path,
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    t = next(t for t in json.loads((pytester.path / "again.json").read_text())["targets"] if t["id"] == "mylib.slow")
    # every stored evaluation that decided its candidate is reused, not repeated
    assert sum(e["resumed"] for e in t["trajectory"]) == stored_decided >= 1
    with sqlite3.connect(db) as con:
        assert [r[0] for r in con.execute("SELECT status FROM runs ORDER BY id")] == ["interrupted", "finished"]


def test_ctrl_c_with_a_model_request_in_flight_stops_in_seconds(pytester: pytest.Pytester) -> None:
    """A server that accepts and never answers: the request would hold the run for
    --maxcode-llm-timeout (600 s) without the abort."""
    import socket

    pytester.makepyfile(mylib=LIB, test_lib=TESTS)
    (pytester.path / "pyproject.toml").write_text(PYPROJECT)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: [accepted.append(server.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    llm = f"--maxcode-llm=openai:m@http://127.0.0.1:{server.getsockname()[1]}/v1"
    env = dict(os.environ, OPENAI_API_KEY="unused")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", llm, "--maxcode-target=mylib.slow"]
    proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env, preexec_fn=_ctrl_c_reaches_it)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not accepted:
            time.sleep(0.1)
        assert accepted and proc.poll() is None, "".join(lines)[-3000:]
        time.sleep(1.0)  # the request is sent and waiting for its reply
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        proc.wait(timeout=60)
        stopped_in = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.close()
    reader.join(timeout=10)
    out = "".join(lines)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert stopped_in < 20, f"took {stopped_in:.1f} s to stop"
    assert "Traceback" not in out, out[-5000:]
    assert [line for line in out.splitlines() if line.startswith("maxcode: interrupted")] == [
        "maxcode: interrupted; wrote the report of 0 finished target(s); resume with the same command"]


def test_a_ctrl_c_whose_keyboardinterrupt_was_lost_stops_the_search_at_its_next_progress_line(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Raised inside a finalizer, a KeyboardInterrupt is printed as "Exception ignored" and
    lost; replaced by an error in a cleanup's ``finally``, it becomes a verdict. The run must
    stop all the same (a full suite once saw one go on to its end after Ctrl-C)."""
    from pytest_maxcode import options
    from pytest_maxcode.errors import SearchInterrupted
    from pytest_maxcode.session import MaxcodeSession

    from pytest_maxcode.targets.decorator import ON_REGISTER

    monkeypatch.setattr("pytest_maxcode.session.REGISTRY", {})  # this process's own targets stay as they are
    session = MaxcodeSession(pytester.parseconfig(), options.load_settings({}, pytester.path / "pyproject.toml"))
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's pytest has it (not nohup's)
    try:
        previous = session._catch_ctrl_c()
        session._searching = True
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)  # the handler runs here
        except KeyboardInterrupt:
            pass  # lost
        assert session._stop.is_set()
        with pytest.raises(SearchInterrupted):
            session._progress("[2/8] checking rows-1.cpp")
        session._searching = False
        session._progress("writing the report")  # what runs after the search still may
    finally:
        signal.signal(signal.SIGINT, outer)
        session.pytest_sessionfinish(None, pytest.ExitCode.INTERRUPTED)  # type: ignore[arg-type]
    assert previous is signal.default_int_handler
    assert session._maybe_attach not in ON_REGISTER  # targets decorated later are not captured
