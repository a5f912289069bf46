"""``maxcode bench pie``: PIE's output rule and metrics directly, then the real CLI on tiny C++ problems.

tests/data/pie/problems.jsonl holds nine pairs over three problems: p_sum (a busy-loop source with
a fast, a same-program, a wrong, a non-compiling, a hanging and a crashing candidate), p_avg
(floating-point output: a 1e-4 error passes, a 1e-2 error fails) and p_bad (its source fails its
own test, so the pair is invalid).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import DATA, run_maxcode

from pytest_maxcode.bench import pie

PIE = DATA / "pie"
PROBLEMS = PIE / "problems.jsonl"
TESTCASES = PIE / "testcases"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")


# ---------------------------------------------------------------- PIE's comparison rule


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ("6\n", "6"),
        ("6   \n\n\n", "6\n"),  # trailing whitespace and empty lines are ignored
        ("1.500100\n", "1.500000"),  # 1e-4 is inside the 1e-3 tolerance
        ("1.5001 2\n", "1.5 2"),  # token by token
        ("  6\n", "6"),  # tokens equal
        ("0.0001", "0"),
        ("nan", "nan"),  # equal strings, though not finite numbers
        ("a b\nc", "a  b\nc\n"),
    ],
)
def test_outputs_match(actual: str, expected: str) -> None:
    assert pie.outputs_match(actual, expected)


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ("1.510000", "1.500000"),  # 1e-2 is not
        ("1.5011", "1.5"),  # just over the 1e-3 bound
        ("16", "15"),
        ("1 2 3", "1 2"),
        ("6\n7", "6"),
        ("6", "6\n7"),
        ("abc", "abd"),
        ("1_000", "1000"),  # Python would parse it, a judge would not
        ("inf", "1e309"),
        ("\n6", "6"),  # only trailing empty lines are ignored
    ],
)
def test_outputs_differ(actual: str, expected: str) -> None:
    assert not pie.outputs_match(actual, expected)


def test_first_difference_says_where() -> None:
    assert pie.first_difference("1\n2\n", "1\n3\n") == "line 2: got '2', expected '3'"
    assert pie.first_difference("1\n", "1\n2\n") == "1 lines, expected 2"
    assert pie.first_difference("1 \n\n", "1") is None


# ---------------------------------------------------------------- metrics and helpers


def test_clipped_speedup() -> None:
    assert pie.clipped_speedup(3.0, 1.5) == 2.0
    assert pie.clipped_speedup(1.0, 2.0) == 1.0  # a slower candidate counts as keeping the source
    assert pie.clipped_speedup(1.0, 0.0) == 1.0


def test_summarize() -> None:
    rows = [
        pie.scored_row("a", "p1", 3.0, 1.0),  # 3x: optimized
        pie.scored_row("b", "p1", 1.05, 1.0),  # correct, under 1.10x
        pie.scored_row("c", "p2", 1.0, 2.0),  # correct, slower: clipped to 1.0
        pie.failed_row("d", "p2", "test 0: wrong output"),
    ]
    assert [r.optimized for r in rows] == [True, False, False, False]
    assert pie.summarize(rows, invalid=2) == {
        "problems": 4,
        "invalid": 2,
        "correct": 3,
        "optimized": 1,
        "mean_speedup": pytest.approx((3.0 + 1.05 + 1.0 + 1.0) / 4),
        "percent_opt": 25.0,
        "percent_correct": 75.0,
    }
    assert pie.summarize([])["mean_speedup"] is None


def test_first_error_line_and_callgrind() -> None:
    stderr = "prog.cpp: In function 'int main()':\nprog.cpp:3:5: error: expected ';'\nprog.cpp:4:1: error: x\n"
    assert pie.first_error_line(stderr, 1) == "prog.cpp:3:5: error: expected ';'"
    assert pie.first_error_line("", 4) == "g++ exited with status 4"
    assert pie.parse_callgrind("events: Ir\nfl=x\n0 5\nsummary: 123456\n") == 123456
    assert pie.parse_callgrind("events: Ir\ntotals: 42\n") == 42
    with pytest.raises(ValueError):
        pie.parse_callgrind("events: Ir\n")
    assert pie.exit_reason(3) == "exit status 3"
    assert pie.exit_reason(-11) == "killed by SIGSEGV"


def test_load_pairs_with_generations(tmp_path: Path) -> None:
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"submission_id_v0": "sum_fast", "code": "int main() {}"}\n')
    pairs = {p.id: p for p in pie.load_pairs(PROBLEMS, "src_code", None, PIE / "generations.jsonl")}
    assert pairs["sum_fast"].candidate is not None and "scanf" in pairs["sum_fast"].candidate  # first answer
    assert pairs["avg_close"].candidate is None  # an empty list of answers
    assert pairs["sum_wrong"].candidate is None  # not in the generations file
    assert pie.load_pairs(PROBLEMS, "src_code", "code", gens)[0].candidate == "int main() {}"


def test_markdown_table_escapes_pipes() -> None:
    row = pie.failed_row("x|1", "p", "does not compile: a || b")
    result = {"timer": "wall", "repeats": 3, "metrics": pie.summarize([row]), "problems": [asdict(row)], "invalid": []}
    table = pie.markdown_table(result)
    assert "| 1.00x | 0.0% | 0/1 (0.0%) | 0 |" in table
    assert "x\\|1" in table and "a \\|\\| b" in table


# ---------------------------------------------------------------- the CLI on real programs


def _bench(tmp: Path, *args: str, env: dict[str, str] | None = None):
    return run_maxcode(["bench", "pie", *args], cwd=tmp, env=env, timeout=120)


@pytest.fixture(scope="module")
def instructions_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    if shutil.which("g++") is None or shutil.which("valgrind") is None:
        pytest.skip("needs g++ and valgrind")
    tmp = tmp_path_factory.mktemp("pie")
    r = _bench(tmp, str(PROBLEMS), "--testcases", str(TESTCASES), "--timer", "instructions", "--timeout", "1",
               "--json", "out.json", "--markdown", "out.md")
    assert r.returncode == 0, r.stderr
    assert (tmp / "out.md").read_text() == r.stdout
    return json.loads((tmp / "out.json").read_text()), r.stdout


@needs_gxx
@needs_valgrind
def test_instruction_metrics(instructions_run: tuple[dict, str]) -> None:
    result, _ = instructions_run
    m = result["metrics"]
    assert (m["problems"], m["invalid"], m["correct"], m["optimized"]) == (8, 1, 3, 1)
    assert m["percent_correct"] == 37.5 and m["percent_opt"] == 12.5
    rows = {r["id"]: r for r in result["problems"]}
    assert m["mean_speedup"] == pytest.approx(statistics.fmean(r["speedup"] for r in rows.values()))
    assert {i for i, r in rows.items() if r["correct"]} == {"sum_fast", "sum_same", "avg_close"}
    assert {i for i, r in rows.items() if r["optimized"]} == {"sum_fast"}
    assert rows["sum_fast"]["speedup"] > 1.10
    assert rows["sum_fast"]["source_time"] > rows["sum_fast"]["candidate_time"] > 0
    assert rows["sum_same"]["speedup"] == 1.0  # the same binary: equal counts
    assert rows["avg_close"]["speedup"] < 1.10
    assert all(r["speedup"] == 1.0 and r["source_time"] is None for r in rows.values() if not r["correct"])


@needs_gxx
@needs_valgrind
def test_failure_reasons(instructions_run: tuple[dict, str]) -> None:
    result, _ = instructions_run
    reasons = {r["id"]: r["reason"] for r in result["problems"]}
    assert reasons["sum_fast"] is None
    assert reasons["sum_wrong"] == "test 1: wrong output (line 1: got '16', expected '15')"
    assert reasons["sum_broken"].startswith("does not compile: prog.cpp:4:5: error: expected")
    assert reasons["sum_hang"] == "test 0: timed out (> 1s)"
    assert reasons["sum_crash"] == "test 0: exit status 3"
    assert reasons["avg_far"] == "test 0: wrong output (line 1: got '1.510000', expected '1.500000')"
    assert result["invalid"] == [{"id": "bad_source", "problem_id": "p_bad",
                                  "reason": "source fails test 0: wrong output (line 1: got '20', expected '10')"}]


@needs_gxx
@needs_valgrind
def test_json_shape_and_markdown(instructions_run: tuple[dict, str]) -> None:
    result, stdout = instructions_run
    assert set(result) == {"suite", "file", "generations", "candidate_key", "testcases", "cxxflags", "timer", "unit",
                           "repeats", "timeout_s", "started", "elapsed_s", "programs", "metrics", "problems", "invalid"}
    assert (result["suite"], result["timer"], result["unit"], result["candidate_key"]) == (
        "pie", "instructions", "instructions", "tgt_code")
    assert result["cxxflags"] == "-O3 --std=c++17"
    assert result["programs"] == {"compiled": 10, "cached": 0}  # nine sources share three programs
    assert [r["id"] for r in result["problems"]] == ["sum_fast", "sum_same", "sum_wrong", "sum_broken", "sum_hang",
                                                     "sum_crash", "avg_close", "avg_far"]
    assert set(result["problems"][0]) == {"id", "problem_id", "correct", "optimized", "reason", "source_time",
                                          "candidate_time", "speedup"}
    assert "| 3/8 (37.5%) | 1 |" in stdout and "| 12.5% |" in stdout
    assert "| sum_fast | p_sum | yes, optimized |" in stdout
    assert "| bad_source | p_bad |" in stdout.split("Invalid")[1]


@needs_gxx
def test_wall_timer_with_generations(tmp_path: Path) -> None:
    r = _bench(tmp_path, str(PROBLEMS), "--testcases", str(TESTCASES), "--generations", str(PIE / "generations.jsonl"),
               "--repeats", "2", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    [out] = (tmp_path / ".maxcode" / "bench").glob("pie-*.json")  # the default JSON path
    result = json.loads(out.read_text())
    assert (result["timer"], result["unit"], result["repeats"], result["candidate_key"]) == ("wall", "seconds", 2, None)
    rows = {r["id"]: r for r in result["problems"]}
    assert rows["sum_fast"]["correct"] and rows["sum_fast"]["speedup"] >= 1.0
    assert 0 < rows["sum_fast"]["source_time"] < 1 and 0 < rows["sum_fast"]["candidate_time"] < 1
    assert rows["sum_same"]["reason"] == "test 1: wrong output (line 1: got '16', expected '15')"  # from "code"
    assert rows["avg_close"]["reason"] == rows["sum_hang"]["reason"] == "no candidate"
    assert (result["metrics"]["correct"], result["metrics"]["invalid"]) == (1, 1)
    assert any((tmp_path / ".maxcode" / "pie-cache").iterdir())


@needs_gxx
def test_compile_cache_and_flags(tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(PROBLEMS.read_text().splitlines()[6] + "\n")  # avg_close
    args = [str(one), "--testcases", str(TESTCASES), "--cache", "cache", "--repeats", "1", "--json", "r.json"]
    runs = []
    for extra in ([], [], ["--cxxflags=-O2 --std=c++17"]):
        r = _bench(tmp_path, *args, *extra)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads((tmp_path / "r.json").read_text()))
    assert [x["programs"] for x in runs] == [{"compiled": 2, "cached": 0}, {"compiled": 0, "cached": 2},
                                             {"compiled": 2, "cached": 0}]
    assert runs[2]["cxxflags"] == "-O2 --std=c++17" and runs[2]["metrics"]["correct"] == 1


@needs_gxx
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the sandbox with a read-only filesystem)")
def test_candidate_programs_run_sandboxed(tmp_path: Path) -> None:
    """A PIE candidate is model output: it runs in the sandbox, so a write outside its folder
    and a secret in the caller's environment are out of its reach, and it is still judged."""
    pwned = tmp_path / "pwned.txt"
    row = json.loads(PROBLEMS.read_text().splitlines()[0])  # sum_fast
    attack = row["tgt_code"].replace("int main() {", (
        "#include <cstdlib>\nint main() {\n"
        f'    if (FILE* f = std::fopen("{pwned}", "w")) {{ std::fputs("x", f); std::fclose(f); }}\n'
        '    if (const char* k = std::getenv("MAXCODE_CANARY_TOKEN")) if (FILE* f = std::fopen("' + str(pwned) + '", "w")) '
        '{ std::fputs(k, f); std::fclose(f); }'), 1)
    assert attack != row["tgt_code"]
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({**row, "tgt_code": attack}) + "\n")
    r = _bench(tmp_path, str(one), "--testcases", str(TESTCASES), "--repeats", "1", "--json", "r.json",
               env={"MAXCODE_CANARY_TOKEN": "canary-pie"})
    assert r.returncode == 0, r.stderr
    (row_out,) = json.loads((tmp_path / "r.json").read_text())["problems"]
    assert row_out["correct"], row_out["reason"]
    assert not pwned.exists()


# ---------------------------------------------------------------- usage errors: one line, exit 2


def _error(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("maxcode: error: "), r.stderr
    return r.stderr.strip()


def test_missing_testcases_dir(tmp_path: Path) -> None:
    r = _bench(tmp_path, str(PROBLEMS), "--testcases", "nowhere")
    assert _error(r) == "maxcode: error: --testcases nowhere: no such directory"


def test_problem_without_test_cases(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"problem_id": "p_none", "submission_id_v0": "x", "src_code": "int main() {}"}) + "\n")
    r = _bench(tmp_path, str(f), "--testcases", str(TESTCASES))
    assert _error(r) == f"maxcode: error: problem p_none: no test cases ({TESTCASES}/p_none/input.<k>.txt)"


def test_bad_input_files(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"problem_id": "p_sum", "src_code": "int main() {}"}\n{oops\n')
    assert _error(_bench(tmp_path, str(f), "--testcases", str(TESTCASES))).startswith(
        f"maxcode: error: {f}:2: not JSON")
    assert _error(_bench(tmp_path, "missing.jsonl", "--testcases", str(TESTCASES))) == (
        "maxcode: error: missing.jsonl: no such file")
    f.write_text('{"problem_id": "p_sum", "code": "int main() {}"}\n')
    assert _error(_bench(tmp_path, str(f), "--testcases", str(TESTCASES))) == (
        f"maxcode: error: {f}:1: needs problem_id and src_code")


def test_usage_errors(tmp_path: Path) -> None:
    assert "--repeats" in _error(_bench(tmp_path, str(PROBLEMS), "--testcases", str(TESTCASES), "--repeats", "0"))
    assert "--testcases" in _error(_bench(tmp_path, str(PROBLEMS)))


@needs_gxx
def test_instructions_without_valgrind(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("g++"), bin_dir / "g++")
    r = _bench(tmp_path, str(PROBLEMS), "--testcases", str(TESTCASES), "--timer", "instructions",
               env={"PATH": str(bin_dir)})
    assert _error(r) == ("maxcode: error: --timer instructions needs valgrind on PATH (apt-get install valgrind), "
                         "or use --timer wall")
