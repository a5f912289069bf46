"""A run whose time runs out while the reference is being timed: the verdict is ``timeout`` and
says where the time went, not that the reference failed (before, a large workload's check read
"runtime_error: the reference failed while being timed: JobTimeout")."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

SLOW = '''
import time

import torch


class Model(torch.nn.Module):
    def forward(self, x, bias):
        time.sleep(1.0)  # a reference call far longer than the run's time limit allows for
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5


def get_inputs():
    return [torch.randn(64, 1024), torch.randn(1024)]


def get_init_inputs():
    return []
'''


def test_time_running_out_in_the_references_calls_is_a_timeout_that_says_so(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(SLOW)
    shutil.copy(DATA / "chain" / "good.cpp", tmp_path / "good.cpp")
    config = CheckConfig(timeout=2.0, ranges=False, time_budget=0.5)
    with Oracle(parse_reference(str(tmp_path / "ref.py")), config, tmp_path) as oracle:
        (v,) = oracle.check([CandidateSpec.from_path(tmp_path / "good.cpp")])
    assert v.status == "timeout", (v.status, v.reasons)
    assert v.reasons[0].startswith("did not finish within 2 s (during a timed call (reference))"), v.reasons
    assert "`timeout` setting" in v.reasons[1], v.reasons
