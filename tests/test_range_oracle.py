"""The oracle runs the range sets (issue 13, Deliver 7): a candidate right only on the captured
range is flagged ``range_limited`` with what it passed and failed; an honest one is not; a set
the reference raises on is not used; the flag survives into the stored verdict."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import DATA

from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference

# y = relu(2x + b)^2 - 0.5; "drops_nan" turns NaN into 0 (torch.relu keeps it), "honest" does not
KERNEL = r"""
#include <dlpack/dlpack.h>
#include <cstdint>
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = x[i] * 2.0f + b[i % cols];
    v = RELU_EXPR;
    y[i] = v * v - 0.5f;
  }
  return 0;
}
"""
RELU = {"honest": "v < 0.f ? 0.f : v", "drops_nan": "v > 0.f ? v : 0.f"}

# the same chain, but the reference refuses inputs that are not finite: special:nan and
# special:inf are then not sets it accepts (refusing NaN alone is not enough: where the inf set
# puts -inf in x and +inf in the bias of the same column, -inf + inf makes a NaN inside the chain,
# and a kernel that drops NaN is rightly flagged; with the run's random seed, about 1 run in 16)
REFUSES_NAN = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x, bias):
        if not (torch.isfinite(x).all() and torch.isfinite(bias).all()):
            raise ValueError("NaN or inf input")
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5


def get_inputs():
    return [torch.randn(16, 256), torch.randn(256)]


def get_init_inputs():
    return []
'''


def _check(project: Path, ranges: bool = True) -> dict[str, dict]:
    for name, relu in RELU.items():
        (project / f"{name}.cpp").write_text(KERNEL.replace("RELU_EXPR", relu))
    cands = [CandidateSpec.from_path(project / f"{name}.cpp") for name in RELU]
    config = CheckConfig(time_budget=0.05, min_rounds=5, timeout=120, ranges=ranges)
    with Oracle(parse_reference(str(project / "ref.py")), config, project) as oracle:
        return {Path(v.candidate).stem: v.to_json() for v in oracle.check(cands)}


@pytest.fixture(scope="module")
def chain_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("range_oracle")
    shutil.copy(DATA / "chain" / "ref.py", project / "ref.py")
    return project


@pytest.fixture(scope="module")
def verdicts(chain_project: Path) -> dict[str, dict]:
    return _check(chain_project)


def test_a_kernel_that_drops_nan_is_range_limited(verdicts: dict[str, dict]) -> None:
    v = verdicts["drops_nan"]
    assert v["status"] in ("faster", "not_faster"), v["reasons"]  # correct on the captured range
    passed, failed = v["range_limited"].split("; failed: ")
    # NaN inputs, and infinities that meet (inf - inf makes NaN): nothing else
    assert "special:nan" in failed.split(", ") and set(failed.split(", ")) <= {"special:nan", "special:inf"}, v["range_limited"]
    passed_sets = passed.removeprefix("passed: ").split(", ")
    assert passed_sets[0] == "captured range", passed
    # infinities either never met (inf passed) or met in a column (inf failed): never both, never neither
    assert ("special:inf" in passed_sets) != ("special:inf" in failed.split(", ")), v["range_limited"]
    assert v["diagnostics"]["range_limited"] == v["range_limited"]  # what the store keeps
    assert "special:nan" in v["diagnostics"]["range"]["failed"]


def test_an_honest_kernel_passes_every_range_set(verdicts: dict[str, dict]) -> None:
    v = verdicts["honest"]
    assert v["status"] in ("faster", "not_faster"), v["reasons"]
    assert v["range_limited"] is None
    tried = v["diagnostics"]["range"]["passed"]
    assert {"x1e3", "x1e-3", "special:nan", "special:inf", "special:denormal"} <= set(tried), tried
    assert v["diagnostics"]["range"]["failed"] == {}


def test_a_set_the_reference_raises_on_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(REFUSES_NAN)
    verdicts = _check(tmp_path)
    for name in RELU:  # without NaN or inf inputs, dropping NaN is invisible: neither is flagged
        v = verdicts[name]
        assert v["range_limited"] is None, (name, v["range_limited"])
        passed = v["diagnostics"]["range"]["passed"]
        assert "special:nan" not in passed and "special:inf" not in passed, passed
        assert "special:zero" in passed and "x1e3" in passed, passed


def test_ranges_off_tries_none(chain_project: Path) -> None:
    verdicts = _check(chain_project, ranges=False)
    assert verdicts["drops_nan"]["range_limited"] is None
    assert "range" not in verdicts["drops_nan"]["diagnostics"]
