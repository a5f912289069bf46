"""``maxcode bench kernelbench`` on a small KernelBench-format fixture: five problems, and
generations that are correct and fast, wrong, correct and slow, correct on a weak check,
and missing."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import DATA, cuda_available, run_maxcode

from pytest_maxcode.bench.kernelbench import (
    PS,
    ProblemResult,
    fast_p,
    generation_for,
    geomean,
    metrics,
)
from pytest_maxcode.bench.problems import find_problems, parse_selection, scaled_source
from pytest_maxcode.errors import NO_CUDA_DEVICE, MaxcodeError

KB = DATA / "kernelbench"


@pytest.fixture(scope="module")
def generations_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("kb")
    r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--generations", str(KB / "generations"),
                     "--no-compile-baseline", "--out", str(out / "run"), "--json", str(out / "kb.json")], cwd=out)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "kb.json").read_text()), r.stdout


def test_the_field_metrics_come_out_exactly(generations_run: tuple[dict, str]) -> None:
    summary, table = generations_run
    by = {r["number"]: r for r in summary["results"]}
    # problem 1 measures about 3.3x; on a loaded runner its two measurements can disagree, and then it is
    # not_faster for being too noisy to decide (seen once in CI-like load): the metrics below hold either way
    assert by[1]["status"] == "faster" or "too noisy to decide" in by[1]["reason"], by[1]["reason"]
    assert {n: r["status"] for n, r in by.items() if n != 1} == {2: "wrong", 3: "not_faster", 4: "not_faster", 5: "no_candidate"}
    assert by[1]["speedup"] > 1.0 and by[3]["speedup"] < 1.0 and by[4]["speedup"] < 1.0
    # fast_p from the measured speedups of the correct problems 1, 3 and 4 (how far above or below
    # each threshold is the host's to say: problem 4 measured 0.3x on an Intel host, 0.55x on an AMD one)
    share = {p: sum(by[n]["speedup"] > p for n in (1, 3, 4)) / 5 for p in (0.5, 0.8, 1.0, 1.5, 2.0)}
    assert by[2]["reason"].startswith("input set") and "no generation for problem 5" in by[5]["reason"]
    m = summary["metrics"]
    assert (m["problems"], m["correct"], m["correctness_rate"]) == (5, 3, 0.6)
    assert m["fast_p"]["eager"] == {"0.0": 0.6, **{str(p): share[p] for p in share}}
    assert m["fast_p"]["compile"] is None  # --no-compile-baseline
    assert m["geomean_speedup"]["eager"] == pytest.approx((by[1]["speedup"] * by[3]["speedup"] * by[4]["speedup"]) ** (1 / 3))
    assert m["weak_check"] == [4] and by[4]["weak_check"] and not by[1]["weak_check"]
    assert summary["mode"] == "generations" and summary["device"] == "cpu"
    assert "### KernelBench level 1: 3/5 correct (60%), cpu, scale 1" in table
    assert "| eager | 60% | " + " | ".join(f"{share[p]:.0%}" for p in share) + " |" in table
    assert "| 4_Zero_like | not_faster (weak check) |" in table and "Weak checks (outputs barely depend on the inputs): 4" in table


def test_the_table_quotes_a_command_that_measures_each_speedup_again(generations_run: tuple[dict, str]) -> None:
    summary, table = generations_run
    by = {r["number"]: r for r in summary["results"]}
    assert by[2]["remeasure"] is None and by[5]["remeasure"] is None  # wrong, no candidate: nothing to re-measure
    cmd, (lo, hi) = by[1]["remeasure"], by[1]["speedup_ci"]
    assert f"- p1: `{cmd}`: each repeat should land in [{lo:.2f}, {hi:.2f}]" in table
    argv = shlex.split(cmd)
    assert argv[:2] == ["maxcode", "check"] and argv[-2:] == ["--repeat", "5"]
    # as written (two repeats, not five, to keep the test short), in the problem's folder: it
    # times the same candidate again and says how many repeats landed inside
    r = run_maxcode([*argv[1:-1], "2"], cwd=Path(summary["problems_dir"]) / "p1")
    assert r.returncode == 0, r.stderr
    assert "of 2 repeats fell inside the quoted" in " ".join(r.stdout.split()), r.stdout


def test_the_compile_baseline_is_measured_in_the_same_run_on_scaled_sizes(tmp_path: Path) -> None:
    r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--problems", "1", "--scale", "0.5",
                     "--generations", str(KB / "generations"), "--out", str(tmp_path / "run")], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "result.json").read_text())
    (row,) = summary["results"]
    assert row["scaled"] == {"batch_size": [256, 128], "dim": [1024, 512]}
    assert row["compile_status"] in ("faster", "not_faster") and row["compile_speedup"] > 0
    if row["correct"]:
        assert row["speedup_vs_compile"] == pytest.approx(row["speedup"] / row["compile_speedup"])
    assert "| compile |" in (tmp_path / "run" / "table.md").read_text()
    scaled = (tmp_path / "run" / "problems" / "p1" / "kb_l1_p1.py").read_text()
    assert "batch_size = 128" in scaled and "dim = 512" in scaled


def test_problems_selection_naming_and_scaling() -> None:
    problems = find_problems(KB, 1, "2-3,5")
    assert [(p.number, p.name) for p in problems] == [(2, "Matmul_ReLU"), (3, "Sum_rows"), (5, "Linear")]
    assert [p.number for p in find_problems(KB / "KernelBench" / "level1", 1)] == [1, 2, 3, 4, 5]
    assert parse_selection("1-3,7") == {1, 2, 3, 7} and parse_selection(None) is None
    with pytest.raises(MaxcodeError, match="use numbers and ranges"):
        parse_selection("one")
    with pytest.raises(MaxcodeError, match="level 1 has no problem 9"):
        find_problems(KB, 1, "9")
    with pytest.raises(MaxcodeError, match="no KernelBench level 2 problems"):
        find_problems(KB, 2)
    gens = KB / "generations"
    assert generation_for(problems[0], gens).name == "level_1_problem_2_sample_0_kernel.py"
    assert generation_for(problems[1], gens).name == "3_Sum_rows.py"
    assert generation_for(problems[2], gens) is None
    src, changes = scaled_source("batch_size = 16\nkernel_size = 3\nstride = 32\nM = 1024  # rows\n", 0.25)
    assert src == "batch_size = 4\nkernel_size = 3\nstride = 32\nM = 256  # rows\n" and changes == {"batch_size": (16, 4), "M": (1024, 256)}


def test_fast_p_counts_only_correct_problems_above_p() -> None:
    rows = [ProblemResult(1, "a", "faster", True, 3.0, speedup_vs_compile=1.2), ProblemResult(2, "b", "not_faster", True, 0.9),
            ProblemResult(3, "c", "wrong"), ProblemResult(4, "d", "faster", True, 1.5, speedup_vs_compile=0.7)]
    assert [fast_p(rows, p) for p in PS] == [0.75, 0.75, 0.75, 0.5, 0.25, 0.25]
    assert fast_p(rows, 1.0, vs="compile") == 0.25
    assert geomean([3.0, 0.9, 1.5]) == pytest.approx((3.0 * 0.9 * 1.5) ** (1 / 3))
    assert metrics([])["correctness_rate"] == 0.0


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    r = run_maxcode(["bench", "kernelbench", str(tmp_path), "--level", "1"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no KernelBench level 1 problems" in r.stderr
    r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--generations", str(tmp_path / "none")], cwd=tmp_path)
    assert r.returncode == 2 and "--generations" in r.stderr and "no such folder" in r.stderr
    if not cuda_available():  # at once, not as a failure of every problem (and exit 0)
        r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--device", "cuda", "--out", str(tmp_path / "o")],
                        cwd=tmp_path)
        assert (r.returncode, r.stderr) == (2, f"maxcode: error: {NO_CUDA_DEVICE}\n")
        assert not (tmp_path / "o").exists()


def test_search_mode_with_the_built_in_policy_compiles_the_problem(tmp_path: Path) -> None:
    r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--problems", "1", "--budget", "1",
                     "--out", str(tmp_path / "run")], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "result.json").read_text())
    (row,) = summary["results"]
    assert summary["mode"] == "search"
    assert Path(row["candidate"]).name.startswith("compile-default-") and row["status"] in ("faster", "not_faster")
    assert row["correct"] and summary["metrics"]["correctness_rate"] == 1.0
    # the candidate is the torch.compile baseline itself: measured once, 1x against itself
    assert row["compile_speedup"] == row["speedup"] and row["speedup_vs_compile"] == 1.0
    assert "kb_l1_p1.Model: evaluating 1 candidate(s)" in r.stderr  # the search loop's own progress


def test_search_mode_with_a_model_writes_a_native_kernel(tmp_path: Path) -> None:
    from llm_fakes import FAKE_KEY, FakeLLMServer, code_reply

    good = (DATA / "chain" / "good.cpp").read_text()
    with FakeLLMServer("anthropic") as srv:
        srv.respond_with(code_reply(good))
        r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--problems", "1", "--budget", "1",
                         "--llm", srv.spec("claude-test"), "--no-compile-baseline", "--out", str(tmp_path / "run")],
                        cwd=tmp_path, env={"ANTHROPIC_API_KEY": FAKE_KEY})
        prompt = srv.requests[0]["system"][0]["text"]
    assert r.returncode == 0, r.stderr
    (row,) = json.loads((tmp_path / "run" / "result.json").read_text())["results"]
    assert row["candidate"].endswith(".cpp") and row["status"] == "faster" and row["speedup"] > 1.05, row.get("reason")
    assert "class Model(nn.Module)" in prompt and "float32[256,1024]" in prompt and "maxcode_run" in prompt
    # the complete prompt (issue 17): every input by position, name and layout, as the worker passes them
    section = prompt[prompt.index("# Inputs (in the order the candidate receives them"):]
    assert "- inputs[0] `x` (argument): float32, shape [256, 1024], strides [1024, 1]" in section, section[:800]
    assert "- inputs[1] `bias` (argument): float32, shape [1024], strides [1]" in section, section[:800]
    assert "- outputs[0]: float32, shape [256, 1024], strides [1024, 1]" in section, section[:800]
