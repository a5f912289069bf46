"""The README's main job: the bundled example gives a real, verified speedup on this CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run_maxcode

EXAMPLE = Path(__file__).parent.parent / "examples" / "elementwise"
#: checks of the example, at most: one that is too noisy to decide is honest, so it is made again,
#: as a user would (a full run on this VM, alone, once measured blocks of 4.41x, 2.71x and 2.44x)
ATTEMPTS = 3


def test_fused_openmp_chain_is_faster_than_eager(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    undecided = []
    for _ in range(ATTEMPTS):
        r = run_maxcode(["check", "problem.py", "fused_chain.cpp", "wrong_partial.cpp", "--json"], cwd=tmp_path / "ex")
        assert r.returncode == 1, r.stderr
        fused, wrong = r.verdicts
        assert wrong["status"] == "wrong"
        assert wrong["diagnostics"]["mismatch"]["first_bad_index"] == [2047, 0]
        if fused["status"] == "faster":
            break
        # never any other verdict: only an interval too wide to call, or blocks that disagree
        # beyond what it covers (a full run, beside other work: 4.67x, 3.93x, 2.73x)
        assert fused["status"] == "not_faster" and any(
            f"too noisy to {w}" in fused["reasons"][0] for w in ("decide", "tell")), fused["reasons"]
        undecided.append(fused["reasons"][0])
    assert fused["status"] == "faster", undecided
    assert fused["speedup_ci"][0] >= 1.05
