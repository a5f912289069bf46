"""Applying writes all or nothing: a failure before the lock is written leaves no orphaned kernel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_maxcode.model.candidate import candidate_hash
from pytest_maxcode.apply import apply_report
from pytest_maxcode.targets.lock import read_lock

KERNEL = 'extern "C" int maxcode_run(const void*, int, void*, int, void*) { return 0; }\n'


def _project(tmp_path: Path) -> dict:
    (tmp_path / "mylib.py").write_text("def f(x):\n    return x + 1\n")
    src = tmp_path / ".maxcode" / "reports" / "kernels" / "mylib.f.cpp"
    src.parent.mkdir(parents=True)
    src.write_text(KERNEL)
    target = {
        "id": "mylib.f", "status": "verified", "verified": True, "reason": "", "speedup": 2.0, "speedup_ci": [1.8, 2.2],
        "device": "cpu", "arch": "x86_64",
        "best": {"source_path": ".maxcode/reports/kernels/mylib.f.cpp", "lang": "cpp", "hash": candidate_hash("native", "cpp", KERNEL)},
        "reference": {"module": "mylib", "qualname": "f", "file": "mylib.py"},
    }
    return {"targets": [target]}


def test_apply_writes_the_kernel_and_its_lock_entry(tmp_path: Path) -> None:
    lines = apply_report(_project(tmp_path), tmp_path)
    assert lines == ["mylib.f: applied maxcode_kernels/mylib.f.cpp (2x) to maxcode.lock"]
    assert (tmp_path / "maxcode_kernels" / "mylib.f.cpp").read_text() == KERNEL
    entry = read_lock(tmp_path / "maxcode.lock")["mylib.f"]
    import hashlib

    assert entry.kernel_hash == hashlib.sha256((tmp_path / "maxcode_kernels" / "mylib.f.cpp").read_bytes()).hexdigest()


def test_a_failure_before_the_lock_leaves_no_kernel_and_says_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tomli_w", None)  # the lock cannot be rendered
    lines = apply_report(_project(tmp_path), tmp_path)
    assert len(lines) == 1 and lines[0].startswith("mylib.f: not applied: ")
    assert not (tmp_path / "maxcode_kernels").exists()
    assert not (tmp_path / "maxcode.lock").exists()


def test_a_reference_that_moved_is_not_applied(tmp_path: Path) -> None:
    report = _project(tmp_path)
    (tmp_path / "mylib.py").write_text("def g(x):\n    return x\n")
    lines = apply_report(report, tmp_path)
    assert lines == [f"mylib.f: not applied: {tmp_path / 'mylib.py'}: cannot find f to hash it"]
    assert not (tmp_path / "maxcode_kernels").exists()
