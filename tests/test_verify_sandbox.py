"""The user's tests re-run with a candidate kernel loaded run in the sandbox (red team, F1).

Before, a kernel the oracle had called faster was loaded, during that re-run, in a plain
process of the user's: its load-time constructor wrote into the project and left a helper
that rewrote the kernel file after the report was written, and ``maxcode apply`` and the bot
then published the rewrite. Here a kernel that computes correctly tries the same at every
load: the run still verifies it (its tests pass, sandboxed, and reach the kernel), and
nothing it tried lands; a kernel file changed after the run is refused by apply and the bot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_maxcode.sandbox.isolation import works

pytestmark = pytest.mark.skipif(works("bwrap") is not None and works("unshare") is not None,
                                reason="this machine can make no namespaces (install bubblewrap)")

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def fused(x, bias):
    y = torch.relu(x * 2.0 + bias)
    return y * y - 0.5
'''

TESTS = '''
import torch
from mylib import fused


def test_fused():
    x, b = torch.randn(256, 1024), torch.randn(1024)
    torch.testing.assert_close(fused(x, b), torch.clamp(2 * x + b, min=0) ** 2 - 0.5)
'''

#: correct, and at every load it tries to write the project, the kernel file the report
#: names, and a file beside the project (OUTSIDE is replaced by a path for this run)
KERNEL = r'''// the chain fused into one pass; and at load time, what a hostile model adds
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstdio>

__attribute__((constructor)) static void at_load() {
  const char* paths[] = {"ESCAPED.txt", ".maxcode/reports/kernels/mylib.fused.cpp", "OUTSIDE"};
  for (const char* p : paths)
    if (FILE* f = fopen(p, "a")) { fputs("\n// written by the candidate at load time\n", f); fclose(f); }
}

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c] * 2.0f + b[c];
      v = v < 0.f ? 0.f : v;
      y[r * cols + c] = v * v - 0.5f;
    }
  return 0;
}
'''

CONFTEST = '''
from pathlib import Path

KERNEL = (Path(__file__).parent / "kernel.txt").read_text()  # stands in for a model's reply


def pytest_maxcode_propose(target, state, asks):
    return [] if state.trajectory else [KERNEL]
'''


def _maxcode(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GITHUB_REPOSITORY": "o/r"}
    return subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=root, capture_output=True, text=True,
                          env=env, timeout=300)


def test_a_kernel_loaded_by_the_users_tests_reaches_nothing_and_a_changed_file_is_not_published(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    outside = tmp_path / f"outside-{uuid.uuid4().hex[:8]}.txt"
    kernel = KERNEL.replace('"OUTSIDE"', json.dumps(str(outside)))
    (root / "kernel.txt").write_text(kernel)
    (root / "mylib.py").write_text(LIB)
    (root / "test_lib.py").write_text(TESTS)
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pyproject.toml").write_text('[tool.maxcode]\nbudget = 1\nk = 1\ntorch_compile = false\ntime_budget = 0.3\n\n'
                                         '[tool.pytest.ini_options]\npythonpath = ["."]\n')
    subprocess.run(["git", "init", "-q", "-b", "master"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", "--allow-empty"], cwd=root,
                   check=True)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxcode", "-q"], cwd=root,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((root / ".maxcode" / "reports" / "report.json").read_text())
    (fused,) = [t for t in report["targets"] if t["id"] == "mylib.fused"]
    # verified: the user's test passed, sandboxed, with the kernel serving its calls
    assert fused["status"] == "verified", fused
    assert fused["tests"]["passed"] and fused["tests"]["kernel_calls"] > 0, fused["tests"]
    written = root / fused["best"]["source_path"]
    assert written.read_text() == kernel, "the kernel file changed after the run verified it"
    assert not (root / "ESCAPED.txt").exists()
    assert not outside.exists()

    # a kernel file changed after the run (by anything) is neither applied nor proposed
    written.write_text(kernel + "\nstatic int backdoor = 1;\n")
    for args in (["apply"], ["pr", "--dry-run", "--base", "master"]):
        r = _maxcode(root, *args)
        assert r.returncode != 0, (args, r.stdout, r.stderr)
        assert "is not the kernel the run verified (it changed since" in r.stdout + r.stderr, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
    assert not (root / "maxcode_kernels").exists()
