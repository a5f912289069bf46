"""Accepted kernels at run time, in fresh processes: dispatch, staleness, opt-out, status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.targets.accept import accept

LIB = '''
import torch
import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def chain(x, bias):
    y = torch.relu(x * 2.0 + bias)
    return y * y - 0.5
'''

# The verified kernel, plus a call counter the test reads to prove the kernel really ran.
KERNEL = (DATA / "chain" / "good.cpp").read_text().replace(
    'extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {',
    'extern "C" int maxcode_test_calls = 0;\n'
    'extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {\n'
    "  ++maxcode_test_calls;",
)

USE = '''
import ctypes
import warnings

import torch
import mylib


def expected(x, b):
    return torch.relu(x * 2.0 + b) ** 2 - 0.5


def calls():
    impl = mylib.chain.maxcode._impl
    return ctypes.c_int.in_dll(impl.kernel.lib, "maxcode_test_calls").value if impl and impl.kernel else 0


def test_dispatch():
    h = mylib.chain.maxcode
    print("STATE", h.active, "|", h.reason)
    x, b = torch.randn(64, 1024), torch.randn(1024)
    first = mylib.chain(x, b)
    second = mylib.chain(x, b)
    torch.testing.assert_close(first, expected(x, b))
    torch.testing.assert_close(second, expected(x, b))
    print("CALLS", calls())
    xg = x.clone().requires_grad_()
    assert mylib.chain(xg, b).grad_fn is not None  # autograd needs the reference
    print("CALLS_AFTER_GRAD", calls())
    mylib.chain(x.t().contiguous().t(), b)  # a layout that was never verified
    print("CALLS_AFTER_STRIDED", calls())
    # the second call ran every check and left a plan: same-signature calls take the compiled call path
    x2 = torch.randn(64, 1024)
    third, fourth = mylib.chain(x2, b), mylib.chain(x2, b)
    torch.testing.assert_close(third, expected(x2, b))
    torch.testing.assert_close(fourth, expected(x2, b))
    assert third.data_ptr() != fourth.data_ptr()  # fresh outputs every call
    print("PLANS", len(getattr(h._impl, "plans", {})))
    print("CALLS_PLANNED", calls())
'''


@pytest.fixture
def proj(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mylib=LIB, test_use=USE)
    accept(
        pytester.path,
        target_id="mylib.chain",
        reference_file=pytester.path / "mylib.py",
        qualname="chain",
        kernel_source=KERNEL,
        lang="cpp",
        device="cpu",
        arch="x86_64",
        speedup=2.5,
        speedup_ci=[2.2, 2.8],
        signatures=[[["float32", 2, True], ["float32", 1, True]]],
    )
    return pytester


def _state(result: pytest.RunResult) -> dict[str, str]:
    out = {}
    for line in result.outlines:
        m = re.search(r"\b(STATE|CALLS_AFTER_GRAD|CALLS_AFTER_STRIDED|CALLS_PLANNED|CALLS|PLANS) (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_accepted_kernel_runs_with_fallbacks_for_grad_and_layout(proj: pytest.Pytester) -> None:
    lock = (proj.path / "maxcode.lock").read_text()
    assert '[targets."mylib.chain"]' in lock and 'kernel = "maxcode_kernels/mylib.chain.cpp"' in lock
    result = proj.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    s = _state(result)
    assert s["STATE"].startswith("kernel |") and "2.5x" in s["STATE"]
    assert s["CALLS"] == "1"  # the first call learned the output shape from the reference
    assert s["CALLS_AFTER_GRAD"] == "1"  # a tensor that requires grad never takes a plan
    assert s["CALLS_AFTER_STRIDED"] == "1"  # nor does a layout that was never verified
    assert s["PLANS"] == "1" and s["CALLS_PLANNED"] == "3"  # one signature, and its later calls ran the kernel
    result.stdout.fnmatch_lines(["*differ from the verified layouts*"])


def test_cosmetic_edit_keeps_the_kernel_but_a_real_edit_makes_it_stale(proj: pytest.Pytester) -> None:
    lib = proj.path / "mylib.py"
    lib.write_text(lib.read_text().replace("def chain(x, bias):", "def chain(x, bias):  # tuned\n    # comment"))
    s = _state(proj.runpytest_subprocess("-s"))
    assert s["STATE"].startswith("kernel")
    lib.write_text(lib.read_text().replace("y * y - 0.5", "y ** 2 - 0.5"))  # same values, new code
    result = proj.runpytest_subprocess("-s")
    s = _state(result)
    assert s["STATE"].startswith("reference | stale: the reference changed")
    assert s["CALLS"] == "0"
    result.stdout.fnmatch_lines(["*MaxcodeWarning: maxcode: mylib.chain: the reference changed*falling back*"])


def test_maxcode_disable_forces_the_reference(proj: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCODE_DISABLE", "1")
    s = _state(proj.runpytest_subprocess("-s"))
    assert s["STATE"] == "reference | MAXCODE_DISABLE is set"
    assert s["CALLS"] == "0"


def test_a_kernel_that_does_not_build_falls_back(proj: pytest.Pytester) -> None:
    kernel = proj.path / "maxcode_kernels" / "mylib.chain.cpp"
    accept(
        proj.path, target_id="mylib.chain", reference_file=proj.path / "mylib.py", qualname="chain",
        kernel_source="int broken(", lang="cpp", device="cpu", arch="x86_64", speedup=2.0, speedup_ci=[1.9, 2.1],
    )
    assert kernel.read_text() == "int broken("
    result = proj.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*the accepted kernel failed*does not build*using the reference*"])


def _status(path: Path) -> tuple[int, list[dict]]:
    p = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "status", "--json"], check=False, cwd=path, capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout or "[]")


def test_status_reports_active_stale_and_missing(proj: pytest.Pytester) -> None:
    code, rows = _status(proj.path)
    assert code == 0 and [(r["target"], r["state"]) for r in rows] == [("mylib.chain", "active")]
    lib = proj.path / "mylib.py"
    lib.write_text(lib.read_text().replace("- 0.5", "- 0.25"))
    code, rows = _status(proj.path)
    assert code == 1 and rows[0]["state"] == "stale"
    (proj.path / "maxcode_kernels" / "mylib.chain.cpp").unlink()
    code, rows = _status(proj.path)
    assert code == 1 and rows[0]["state"] == "missing"


def test_status_device_mismatch(proj: pytest.Pytester) -> None:
    import tomli_w
    import tomllib

    lock = proj.path / "maxcode.lock"
    data = tomllib.loads(lock.read_text())
    data["targets"]["mylib.chain"]["device"] = "cuda"
    data["targets"]["mylib.chain"]["arch"] = "sm_1000"
    lock.write_text(tomli_w.dumps(data))
    code, rows = _status(proj.path)
    assert code == 0 and rows[0]["state"] == "device-mismatch"


INPLACE_LIB = '''
import pytest_maxcode as maxcode


@maxcode.optimize(inplace=True)
def scale_(x, alpha):
    x.mul_(alpha)
    return x
'''

INPLACE_USE = '''
import ctypes
import torch
import mylib_inplace


def test_inplace_dispatch():
    h = mylib_inplace.scale_.maxcode
    x = torch.arange(8, dtype=torch.float32)
    out = mylib_inplace.scale_(x, 2.0)
    calls = ctypes.c_int.in_dll(h._impl.kernel.lib, "maxcode_test_calls").value
    print("INPLACE", h.active, out is x, x.tolist(), calls)
'''


def test_inplace_kernel_writes_the_argument_and_returns_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mylib_inplace=INPLACE_LIB, test_inplace=INPLACE_USE)
    kernel = (DATA / "inplace" / "scale.cpp").read_text().replace(
        'extern "C" int maxcode_run(', 'extern "C" int maxcode_test_calls = 0;\nextern "C" int maxcode_run('
    ).replace("if (n_in != 2 || n_out != 0) return 1;", "if (n_in != 2 || n_out != 0) return 1;\n  ++maxcode_test_calls;")
    accept(
        pytester.path, target_id="mylib_inplace.scale_", reference_file=pytester.path / "mylib_inplace.py",
        qualname="scale_", kernel_source=kernel, lang="cpp", device="cpu", arch="x86_64",
        speedup=1.5, speedup_ci=[1.2, 1.8], signatures=[[["float32", 1, True], ["float"]]], returns="arg0",
    )
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*INPLACE kernel True [[]0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0[]] 1*"])


WARN_USE = '''
import warnings

import torch


def test_warns_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import mylib

        x, b = torch.randn(64, 1024), torch.randn(1024)
        for _ in range(3):
            torch.testing.assert_close(mylib.chain(x, b), torch.relu(x * 2.0 + b) ** 2 - 0.5)
    mine = [str(w.message) for w in caught if "maxcode" in str(w.message)]
    print("WARNINGS", len(mine), "|", mylib.chain.maxcode.active, "|", " / ".join(mine))
'''


def _warnings(result: pytest.RunResult) -> str:
    return next(line for line in result.outlines if "WARNINGS" in line)


def test_a_missing_accepted_kernel_warns_once_and_runs_the_reference(proj: pytest.Pytester) -> None:
    (proj.path / "maxcode_kernels" / "mylib.chain.cpp").unlink()
    proj.makepyfile(test_warn=WARN_USE)
    result = proj.runpytest_subprocess("-s", "test_warn.py")
    result.assert_outcomes(passed=1)
    line = _warnings(result)
    assert "WARNINGS 1 | reference |" in line
    assert "maxcode_kernels/mylib.chain.cpp does not exist; falling back to the reference" in line


def test_an_unloadable_accepted_kernel_warns_once_and_runs_the_reference(proj: pytest.Pytester) -> None:
    # it builds, but has no maxcode_run: the library cannot be loaded as a kernel
    accept(
        proj.path, target_id="mylib.chain", reference_file=proj.path / "mylib.py", qualname="chain",
        kernel_source='extern "C" int not_a_kernel() { return 0; }\n', lang="cpp", device="cpu", arch="x86_64",
        speedup=2.0, speedup_ci=[1.9, 2.1],
    )
    proj.makepyfile(test_warn=WARN_USE)
    result = proj.runpytest_subprocess("-s", "test_warn.py")
    result.assert_outcomes(passed=1)
    line = _warnings(result)
    assert "WARNINGS 1 | reference |" in line and "the accepted kernel failed" in line
