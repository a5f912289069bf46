"""A run whose time runs out while the reference is being timed: the verdict is ``timeout`` and
says where the time went, not that the reference failed (before, a large workload's check read
"runtime_error: the reference failed while being timed: JobTimeout")."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

#: the chain's reference with a call far longer than the run's time limit allows for
SLOW = "import time\n" + (DATA / "chain" / "ref.py").read_text().replace(
    "    def forward(self, x, bias):\n", "    def forward(self, x, bias):\n        time.sleep(1.0)\n")


def test_time_running_out_in_the_references_calls_is_a_timeout_that_says_so(tmp_path: Path) -> None:
    assert "time.sleep(1.0)" in SLOW
    (tmp_path / "ref.py").write_text(SLOW)
    shutil.copy(DATA / "chain" / "good.cpp", tmp_path / "good.cpp")
    config = CheckConfig(timeout=2.0, ranges=False, time_budget=0.5)
    with Oracle(parse_reference(str(tmp_path / "ref.py")), config, tmp_path) as oracle:
        (v,) = oracle.check([CandidateSpec.from_path(tmp_path / "good.cpp")])
    assert v.status == "timeout", (v.status, v.reasons)
    assert v.reasons[0].startswith("did not finish within 2 s (during a timed call (reference))"), v.reasons
    assert "`timeout` setting" in v.reasons[1], v.reasons
