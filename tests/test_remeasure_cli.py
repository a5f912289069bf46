"""``maxcode remeasure``: its usage errors are one line with what to do, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_maxcode


def test_without_a_report_it_says_to_run_pytest_maxcode_first(tmp_path: Path) -> None:
    r = run_maxcode(["remeasure", "lib.f"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no report at" in r.stderr and "run pytest --maxcode first" in r.stderr


def test_an_unknown_or_unmeasured_target_is_named_with_what_there_is(tmp_path: Path) -> None:
    reports = tmp_path / ".maxcode" / "reports"
    reports.mkdir(parents=True)
    report = {"targets": [{"id": "lib.f", "status": "skipped", "speedup": None, "speedup_ci": None, "best": None}]}
    (reports / "report.json").write_text(json.dumps(report))
    r = run_maxcode(["remeasure", "lib.g"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().endswith("lib.g is not in " + str(reports / "report.json") + " (targets: lib.f)"), r.stderr
    r = run_maxcode(["remeasure", "lib.f", "--repeat", "3"], cwd=tmp_path)
    assert r.returncode == 2 and "lib.f has no measured kernel in the report (skipped): nothing to re-measure" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_python_dash_m_pytest_maxcode_is_the_maxcode_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pytest_maxcode", "remeasure", "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage: maxcode remeasure" in r.stdout, r.stdout + r.stderr
