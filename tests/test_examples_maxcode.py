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


def test_kernelbench_module_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, report = run_example("kernelbench_module", tmp_path)
    (t,) = report["targets"]
    assert t["id"] == "model.Model"
    assert (tmp_path / "kernelbench_module" / ".maxcode" / "inputs" / "model.Model" / "module.pt").is_file()
    # both seed configurations compute the module, parameters arriving after the input; the
    # module's compiled variants (its constructor takes an argument) compete beside them
    seeds = [row for row in t["trajectory"] if row["origin"].startswith("seed:")]
    assert len(seeds) == 2 and all(row["status"] in ("faster", "not_faster", "slower") for row in seeds), t["trajectory"]
    assert t["candidates"]["tried"] == 4, t["trajectory"]
    assert t["status"] in ("verified", "no_speedup"), t["reason"]
    if t["status"] == "verified":
        assert t["tests"]["passed"] and t["tests"]["kernel_calls"] >= 1
    if t.get("best"):  # the configuration its kernel was verified on, which the lock then records
        import torch

        from pytest_maxcode.targets.introspect import module_state, reads_training

        monkeypatch.syspath_prepend(str(tmp_path / "kernelbench_module"))  # the pickled instance's class
        captured = torch.load(tmp_path / "kernelbench_module" / ".maxcode" / "inputs" / "model.Model" / "module.pt",
                              weights_only=False)
        assert t["module_state"] == module_state(captured) and t["module_state"], t.get("module_state")
        assert t.get("eval_only") == (reads_training(captured) or None)


def test_cuda_example_seeds_compile_everywhere(tmp_path: Path) -> None:
    """Every configuration of the CUDA seed builds with nvcc, GPU or not."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    from pytest_maxcode.native import build
    from pytest_maxcode.search.policy import expand

    seed = EXAMPLES / "cuda_project" / "maxcode_kernels" / "seeds" / "gelu_ops.fused_bias_gelu" / "gelu.cu"
    variants = expand(seed.read_text(), ".cu")
    assert [params for _, params in variants] == [{"BLOCK": "128"}, {"BLOCK": "256"}, {"BLOCK": "512"}]
    sources = []
    for i, (text, _) in enumerate(variants):
        p = tmp_path / f"gelu{i}.cu"
        p.write_text(text)
        sources.append(build.Source(p, "cuda"))
    results = build.build_all(sources, tmp_path / "cache")
    assert all(r.ok for r in results), [r.errors for r in results]


def test_cuda_example_without_a_gpu_says_why(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _, report = run_example("cuda_project", tmp_path)
    (t,) = report["targets"]
    assert t["status"] == "skipped" and "needs a CUDA device" in t["reason"]


@pytest.mark.gpu
def test_cuda_example_on_a_gpu(tmp_path: Path) -> None:
    _, report = run_example("cuda_project", tmp_path)
    (t,) = report["targets"]
    # its three seeds, and the built-in policy's torch.compile candidates beside them
    seeds = [n for n in t["trajectory"] if n["origin"].startswith("seed:")]
    assert len(seeds) == 3 and all(n["status"] in ("faster", "not_faster") for n in seeds), t["trajectory"]
    assert t["status"] in ("verified", "no_speedup"), t["reason"]
