"""Interleaved regression mode (issue 14): base and head benchmarks run alternately in short
processes, each process one sample. On a project whose head slows one benchmark 2x, one by 20%
and leaves one unchanged, beside a CPU hog, it flags the 2x every time and the unchanged never."""

from __future__ import annotations

import shutil
from pathlib import Path

import git
import pytest
from conftest import run_maxcode
from test_aa_runs import cpu_hog

from pytest_maxcode.bench import ab
from pytest_maxcode.bot.compare import Timings
from pytest_maxcode.errors import MaxcodeError

BENCH = '''
def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def test_doubled(benchmark):
    benchmark(work, {doubled})


def test_fifth(benchmark):
    benchmark(work, {fifth})


def test_same(benchmark):
    benchmark(work, 4000)
'''
ARGS = ["--benchmark-max-time=0.05", "--benchmark-min-rounds=10", "--benchmark-warmup=off"]
REPEATS = 10


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with the project in a subfolder: base, then a head that slows two benchmarks."""
    root = tmp_path_factory.mktemp("ab")
    r = git.Repo.init(root)
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t").set_value("user", "email", "t@example.com")
    (root / "proj").mkdir()
    (root / "proj" / "test_bench.py").write_text(BENCH.format(doubled=4000, fifth=4000))
    r.index.add(["proj/test_bench.py"])
    r.index.commit("base")
    r.create_tag("base")
    (root / "proj" / "test_bench.py").write_text(BENCH.format(doubled=8000, fifth=4800))
    r.index.add(["proj/test_bench.py"])
    r.index.commit("head")
    r.create_tag("head")
    return root


def _verdicts(repo: Path) -> dict[str, str]:
    base, head = ab.interleaved(repo, "base", "head", ARGS, runs=3, project="proj")
    result = ab.judge(base, head)
    return {c.name.split("::")[-1]: c.verdict for c in result.comparisons}


def test_the_2x_is_flagged_and_the_unchanged_never_beside_a_cpu_hog(repo: Path) -> None:
    seen = []
    with cpu_hog(1):
        for _ in range(REPEATS):
            seen.append(_verdicts(repo))
    assert [v["test_doubled"] for v in seen] == ["regressed"] * REPEATS, seen
    assert [v["test_same"] for v in seen] == ["unchanged"] * REPEATS, seen
    assert all(v["test_fifth"] in ("regressed", "unchanged") for v in seen), seen


def test_the_checkout_is_left_as_it_was(repo: Path) -> None:
    ab.interleaved(repo, "base", "head", ARGS, runs=2, project="proj")
    r = git.Repo(repo)
    assert [w for w in r.git.worktree("list").splitlines()] == [r.git.worktree("list").splitlines()[0]]
    assert not r.is_dirty(untracked_files=True)


def test_bad_input_is_one_line(repo: Path) -> None:
    with pytest.raises(MaxcodeError, match="'nope' is not a commit"):
        ab.interleaved(repo, "nope", "head", ARGS, project="proj")
    with pytest.raises(MaxcodeError, match="does not exist on the base commit"):
        ab.interleaved(repo, "base", "head", ARGS, project="elsewhere")
    with pytest.raises(MaxcodeError, match="pytest failed on the base"):
        ab.interleaved(repo, "base", "head", ["--no-such-option"], project="proj")


def test_the_judge_works_on_run_medians() -> None:
    base = {"b": Timings("b", 1.0, 1.0, 0.02, 5, [0.98, 1.0, 1.01, 0.99, 1.02])}
    slow = {"b": Timings("b", 2.0, 2.0, 0.05, 5, [1.95, 2.0, 2.05, 2.02, 1.98])}
    same = {"b": Timings("b", 1.0, 1.0, 0.02, 5, [1.01, 0.99, 1.0, 1.02, 0.98])}
    assert ab.judge(base, slow).comparisons[0].verdict == "regressed"
    assert ab.judge(base, same).comparisons[0].verdict == "unchanged"
    assert ab.judge(slow, base).comparisons[0].verdict == "improved"
    c = ab.judge(base, slow).comparisons[0]
    assert c.change_ci[0] < 1.0 < c.change_ci[1] and c.method == "welch-t on runs"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="--timer instructions needs valgrind (apt-get install valgrind)")
def test_instruction_mode_flags_the_20_percent_and_never_the_unchanged(repo: Path) -> None:
    with cpu_hog(1):  # counts do not move with the load
        base, head = ab.interleaved(repo, "base", "head", [], project="proj", timer="instructions")
    result = ab.judge(base, head, timer="instructions")
    verdicts = {c.name.split("::")[-1]: c for c in result.comparisons}
    assert verdicts["test_doubled"].verdict == "regressed" and 0.8 < verdicts["test_doubled"].change < 1.2
    assert verdicts["test_fifth"].verdict == "regressed" and 0.12 < verdicts["test_fifth"].change < 0.28
    assert verdicts["test_same"].verdict == "unchanged" and abs(verdicts["test_same"].change) < 0.01
    assert all(c.method == "instructions" for c in result.comparisons)


def test_the_command_line_runs_in_the_project_folder_and_fails_on_a_regression(repo: Path) -> None:
    r = run_maxcode(["bench-ab", "base", "head", "--runs", "4", "--fail-on-regression", "--", *ARGS], cwd=repo / "proj")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "| `test_bench.py::test_doubled` |" in r.stdout and "🔴 slower" in r.stdout
    assert "each process's fastest round one sample" in r.stdout
    bad = run_maxcode(["bench-ab", "base", "nope"], cwd=repo / "proj")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("maxcode: error: bench-ab: 'nope' is not a commit")
