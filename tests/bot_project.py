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

from pytest_maxcode.model.candidate import candidate_hash
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

    def report(self, kernel: str, speedup: float, ci: tuple[float, float], *, name: str = "report.json",
               reason: str = "faster with a strong check") -> dict[str, Any]:
        """A verified report for the example's target, with this kernel and these numbers, shaped as
        ``pytest --maxcode`` writes it (``test_bot_body`` validates it against the report's schema)."""
        kernels = self.project / ".maxcode" / "reports" / "kernels"
        kernels.mkdir(parents=True, exist_ok=True)
        (kernels / f"{TARGET}.cpp").write_text(kernel)
        timing = {"reference": {"median_s": 1e-3, "mean_s": 1e-3, "stddev_s": 1e-4, "rounds": 100},
                  "candidate": {"median_s": 1e-3 / speedup, "mean_s": 1e-3 / speedup, "stddev_s": 1e-5, "rounds": 300}}
        sha = candidate_hash("native", "cpp", kernel)
        target = {
            "id": TARGET, "kind": "function", "status": "verified", "verified": True, "weak_check": False, "reason": reason,
            "device": "cpu", "arch": "x86_64", "sandbox": "bwrap", "range_limited": None,
            "speedup": speedup, "speedup_ci": list(ci), "baseline_s": 1e-3, "best_s": 1e-3 / speedup,
            "best": {"source_path": f".maxcode/reports/kernels/{TARGET}.cpp", "hash": sha, "lang": "cpp",
                     "origin": "seed:chain.cpp", "params": {}},
            "trajectory": [], "elapsed_s": 1.0,
            "reference": {"module": "mylib", "qualname": "fused_chain", "file": "mylib.py"},
            "tests": {"passed": True, "summary": "3 passed", "rerun": TESTS},
            "benchmarks": [{"name": "tests/test_mylib.py::test_benchmark_chain", **timing, "speedup": speedup,
                            "speedup_ci": list(ci)}],
            "workloads": [{"name": "w1", "signature": "float32[512,1024]@cpu, float32[1024]@cpu", "n_sets": 2,
                           "speedup": speedup, "speedup_ci": list(ci), "reference_s": 1e-3, "candidate_s": 1e-3 / speedup}],
            "candidates": {"tried": 2, "correct": 2, "faster": 1, "failed": {}},
            "search": {"strategy": "sweep", "policy": "builtin", "llm": None, "observation": None,
                       "stop_reason": "evaluation budget of 2 per target reached", "llm_calls": 0, "tokens": 0, "cost_usd": 0.0,
                       "evaluations": 2, "curves": {}},
        }
        report = {"schema_version": 1, "tool_version": "test", "created_at": "2026-11-24T00:00:00Z",
                  "machine": {"host": "test", "cpu": "test CPU", "cores": "2", "torch": "2.x", "device": "cpu"},
                  "options": {"budget": 2, "time": None, "min_speedup": 1.05, "apply": False, "policy": "builtin", "device": "cpu"},
                  "targets": [target]}
        (self.project / name).write_text(json.dumps(report))
        return report

    def change_reference(self) -> None:
        """A person changes the reference's code on main (and the checkout the bot runs in)."""
        path = self.project / "mylib.py"
        text = path.read_text()
        path.write_text(text.replace("    return ", f"    _ = {text.count('_ = ')}\n    return "))
        repo = git.Repo(self.top)
        repo.index.add([str(path)])
        human = git.Actor("A Human", "human@example.com")
        repo.index.commit("reshape the reference", author=human, committer=human)
        repo.git.push("origin", "main:main")

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
    # one candidate, and no pytest-benchmark re-runs, are enough for a test that runs the body's search command
    text = (project / "pyproject.toml").read_text().replace("budget = 8", "budget = 1")
    (project / "pyproject.toml").write_text(text)
    tests = project / "tests" / "test_mylib.py"
    tests.write_text(tests.read_text().split("\n\ndef test_benchmark_chain")[0] + "\n")
    github_fake.checkout_with_origin(top, origin, "the library")
    return Repo(top, project, origin)
