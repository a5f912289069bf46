"""A repository for the bot's tests, built by hand in a fraction of a second: the bundled chain
example as a project (optionally in a subfolder of the repository), a bare ``origin``, and
reports written the way ``pytest --maxcode`` writes them, with the numbers a test chooses. The
bot only reads a report, so no search runs here."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import github_fake

from pytest_maxcode.search.policy import expand

EXAMPLE = Path(__file__).parent.parent / "examples" / "chain_project"
TARGET = "mylib.fused_chain"
BRANCH = f"maxcode/optimize-{TARGET}"
SEED = EXAMPLE / "maxcode_kernels" / "seeds" / TARGET / "chain.cpp"
TESTS = ["tests/test_mylib.py::test_matches_formula[512]", "tests/test_mylib.py::test_negative_inputs_give_minus_half"]


def tune(index: int) -> str:
    """One tune setting of the example's seed (``CHUNK`` x ``UNROLL``): same idea, another hash."""
    return expand(SEED.read_text(), ".cpp")[index][0]


@dataclass
class Repo:
    top: Path  # the repository's root (a clone of origin)
    project: Path  # the project's folder in it
    origin: Path

    def report(self, kernel: str, speedup: float, ci: tuple[float, float], *, reference: str = "ref-1",
               name: str = "report.json", reason: str = "faster with a strong check") -> dict[str, Any]:
        """A verified report for the example's target, with this kernel and these numbers."""
        kernels = self.project / ".maxcode" / "reports" / "kernels"
        kernels.mkdir(parents=True, exist_ok=True)
        (kernels / f"{TARGET}.cpp").write_text(kernel)
        report = {
            "tool_version": "test", "machine": {"cpu": "test CPU", "cores": 2, "torch": "2.x"},
            "targets": [{
                "id": TARGET, "status": "verified", "verified": True, "reason": reason, "device": "cpu", "arch": "x86_64",
                "speedup": speedup, "speedup_ci": list(ci), "baseline_s": 1e-3, "best_s": 1e-3 / speedup,
                "best": {"source_path": f".maxcode/reports/kernels/{TARGET}.cpp", "lang": "cpp"},
                "reference": {"file": "mylib.py", "qualname": "fused_chain", "hash": reference},
                "tests": {"passed": True, "summary": "3 passed", "rerun": TESTS},
                "workloads": [{"signature": "float32[512, 1024], float32[1024]", "n_sets": 2, "speedup": speedup,
                               "speedup_ci": list(ci), "reference_s": 1e-3, "candidate_s": 1e-3 / speedup}],
            }],
        }
        (self.project / name).write_text(json.dumps(report))
        return report

    def merge(self, branch: str = BRANCH) -> None:
        """Merge the bot's branch into main on origin, as the merge button would (fast-forward)."""
        repo = git.Repo(self.top)
        repo.git.fetch("origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
        repo.git.merge("--ff-only", f"origin/{branch}")
        repo.git.push("origin", "main:main")


def make_repo(tmp: Path, subfolder: str = "") -> Repo:
    """The example under ``tmp/work/<subfolder>``, committed on main and pushed to ``tmp/origin.git``."""
    top, origin = tmp / "work", tmp / "origin.git"
    project = top / subfolder if subfolder else top
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".maxcode", "maxcode.lock", "__pycache__"))
    # one candidate is enough for a test that runs the body's search command
    text = (project / "pyproject.toml").read_text().replace("budget = 8", "budget = 1")
    (project / "pyproject.toml").write_text(text)
    github_fake.checkout_with_origin(top, origin, "the library")
    return Repo(top, project, origin)
