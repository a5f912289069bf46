"""The bundled example projects under ``pytest --maxcode``, as a user would run them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.report import validate

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proj = tmp_path / name
    shutil.copytree(EXAMPLES / name, proj, ignore=shutil.ignore_patterns(".maxcode", "maxcode.lock"))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--maxcode", "-q", "-p", "no:cacheprovider", "--maxcode-json=r.json"],
        cwd=proj, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    report = json.loads((proj / "r.json").read_text())
    assert validate(report) == []
    return r, report


def test_kernelbench_module_example(tmp_path: Path) -> None:
    r, report = run_example("kernelbench_module", tmp_path)
    (t,) = report["targets"]
    assert t["id"] == "model.Model"
    assert (tmp_path / "kernelbench_module" / ".maxcode" / "inputs" / "model.Model" / "module.pt").is_file()
    # both seed configurations compute the module, parameters arriving after the input
    assert t["candidates"]["tried"] == 2 and t["candidates"]["correct"] == 2, t["trajectory"]
    assert t["status"] in ("verified", "no_speedup"), t["reason"]
    if t["status"] == "verified":
        assert t["tests"]["passed"] and t["tests"]["kernel_calls"] >= 1
