"""The README's main job: the bundled example gives a real, verified speedup on this CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run_maxcode

EXAMPLE = Path(__file__).parent.parent / "examples" / "elementwise"


def test_fused_openmp_chain_is_faster_than_eager(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    r = run_maxcode(["check", "problem.py", "fused_chain.cpp", "wrong_partial.cpp", "--json"], cwd=tmp_path / "ex")
    assert r.returncode == 1, r.stderr
    fused, wrong = r.verdicts
    assert fused["status"] == "faster", fused["reasons"]
    assert fused["speedup_ci"][0] >= 1.05
    assert wrong["status"] == "wrong"
    assert wrong["diagnostics"]["mismatch"]["first_bad_index"] == [2047, 0]
