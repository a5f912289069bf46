"""Interleaved regression mode (issue 14): base and head benchmarks run alternately in short
processes, each process one sample. On a project whose head slows one benchmark 2x, one by 20%
and leaves one unchanged, beside a CPU hog, it flags the 2x every time and the unchanged never."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path

import git
import pytest
from conftest import run_maxcode
from test_aa_runs import cpu_hog

from pytest_maxcode.bench import ab
from pytest_maxcode.bench.history import KEEP, History, Record
from pytest_maxcode.bot.compare import RUNS_METHOD, Timings, markdown
from pytest_maxcode.report import sparkline
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
REPEATS = 10  # as issue 14 asks


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with the project in a subfolder: base, then a head that slows two benchmarks."""
    root = tmp_path_factory.mktemp("ab")
    _two_commits(root, {"proj/test_bench.py": (BENCH.format(doubled=4000, fifth=4000), BENCH.format(doubled=8000, fifth=4800))})
    return root


def _verdicts(repo: Path) -> dict[str, str]:
    base, head = ab.interleaved(repo, "base", "head", ARGS, runs=ab.RUNS, project="proj")  # the default: its power is the claim
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
    with pytest.raises(MaxcodeError, match="does not exist on the head commit"):
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
    assert c.change_ci[0] < 1.0 < c.change_ci[1] and c.method == RUNS_METHOD


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="--timer instructions needs valgrind (apt-get install valgrind)")
def test_instruction_mode_flags_the_20_percent_and_never_the_unchanged(repo: Path) -> None:
    # counts hardly move with the load: an unchanged benchmark's count moved by up to 2.1% beside
    # busy processes (by 0.7% and 1.3% in 2 of 12 comparisons here, with addresses fixed), far
    # inside the 10% threshold; the 20% and 2x stand well clear of that
    with cpu_hog(1):
        base, head = ab.interleaved(repo, "base", "head", [], project="proj", timer="instructions")
    result = ab.judge(base, head, timer="instructions")
    verdicts = {c.name.split("::")[-1]: c for c in result.comparisons}
    assert verdicts["test_doubled"].verdict == "regressed" and 0.8 < verdicts["test_doubled"].change < 1.2
    assert verdicts["test_fifth"].verdict == "regressed" and 0.12 < verdicts["test_fifth"].change < 0.28
    assert verdicts["test_same"].verdict == "unchanged" and abs(verdicts["test_same"].change) < 0.03
    assert all(c.method == "instructions" for c in result.comparisons)


def test_the_command_line_runs_in_the_project_folder_and_fails_on_a_regression(repo: Path) -> None:
    # six runs a side: with four, twice in CI a loaded runner spread one benchmark's base runs by 30%
    # and the 2x (+51% [+8%, +110%], Holm p 0.14) was not significant
    r = run_maxcode(["bench-ab", "base", "head", "--runs", "6", "--fail-on-regression", "--head-label", "merge of head into main",
                     "--", *ARGS], cwd=repo / "proj")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-1000:]
    assert "| `test_bench.py::test_doubled` |" in r.stdout and "🔴 slower" in r.stdout
    assert "each process's fastest round one sample" in r.stdout
    shas = [git.Repo(repo).commit(ref).hexsha[:12] for ref in ("base", "head")]
    assert (f"Re-measure from the repository's root: `cd proj && maxcode bench-ab {shas[0]} {shas[1]} --runs 6 --timer time "
            f"-- {' '.join(ARGS)}`.") in r.stdout
    assert f"Base `base` ({shas[0]}), head `merge of head into main` ({shas[1]})" in r.stdout
    bad = run_maxcode(["bench-ab", "base", "nope"], cwd=repo / "proj")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("maxcode: error: bench-ab: 'nope' is not a commit")


def test_history_gives_a_stored_baseline_and_a_trend(repo: Path, tmp_path: Path) -> None:
    """bench-record stores a commit's per-process figures; bench-ab --baseline stored then runs only
    the head, names both commits, and shows the branch's trend."""
    history = tmp_path / "history.json"
    commits = {t: git.Repo(repo).commit(t).hexsha for t in ("base", "head")}
    for ref in ("head", "base"):  # two records on the branch: a trend of two points
        r = run_maxcode(["bench-record", ref, "--history", str(history), "--branch", "main", "--runs", "2", "--", *ARGS],
                        cwd=repo / "proj")
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"of {commits[ref][:12]} (main, time)" in r.stdout
    stored = History.load(history)
    assert [rec.commit for rec in stored.records] == [commits["head"], commits["base"]]
    assert all(len(xs) == 2 for xs in stored.records[1].samples.values())
    assert [rec.processes for rec in stored.records] == ["forked", "forked"]  # the default kind of run, as recorded

    out = tmp_path / "cmp.json"
    r = run_maxcode(["bench-ab", "base", "head", "--runs", "3", "--history", str(history), "--branch", "main",
                     "--baseline", "stored", "--json", str(out), "--", *ARGS], cwd=repo / "proj")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert (data["base_commit"], data["head_commit"]) == (commits["base"], commits["head"])
    assert data["baseline"].startswith("stored by the run of")
    doubled = next(c for c in data["comparisons"] if c["name"].endswith("test_doubled"))
    assert doubled["base_median_s"] == pytest.approx(stored.records[1].medians()[doubled["name"]])
    assert f"Base `base` ({commits['base'][:12]}), head `head` ({commits['head'][:12]})" in r.stdout
    assert "base trend |" in r.stdout and "(2) |" in r.stdout
    assert len(History.load(history).records) == 2  # a stored baseline is not stored again

    # no record of the base measured with these arguments, in new interpreters: the base is measured, and
    # stored as measured, and the command that measures it again starts new interpreters too
    r = run_maxcode(["bench-ab", "base", "head", "--runs", "2", "--history", str(history), "--baseline", "stored",
                     "--no-fork-server", "--json", str(out), "--", *ARGS, "-k", "same"], cwd=repo / "proj")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert "holds no figures of the base" in r.stderr and data["baseline"] is None
    assert "--runs 2 --timer time --no-fork-server -- " in data["remeasure"], data["remeasure"]
    newest = History.load(history).records[-1]
    assert (newest.args, newest.processes) == ((*ARGS, "-k", "same"), "fresh")


LIMIT = math.log1p(0.1)


def test_the_change_interval_clears_the_threshold_exactly_when_the_rank_test_does() -> None:
    """The printed interval and the verdict's test agree: it lies beyond a margin exactly when
    the one-sided test of a change beyond that margin rejects at 2.5%."""
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    rejected = 0
    for _ in range(300):
        m, n = rng.choice([4, 5, 7]), rng.choice([4, 6, 7])
        lb = [rng.gauss(0.0, 0.15) for _ in range(m)]
        shift = rng.uniform(-0.6, 0.6)
        lh = [rng.gauss(shift, 0.15) for _ in range(n)]
        lo, hi = (math.log1p(x) for x in ab._change_interval(lb, lh))
        slower, faster = ab.beyond(lb, lh, LIMIT, stats.mannwhitneyu), ab.beyond(lb, lh, -LIMIT, stats.mannwhitneyu)
        assert (lo > LIMIT) == (slower <= 0.025) and (hi < -LIMIT) == (faster <= 0.025), (lb, lh, lo, hi)
        rejected += lo > LIMIT or hi < -LIMIT
    assert 30 < rejected < 270  # both outcomes were exercised


def test_identical_code_that_a_test_of_any_change_flagged_is_unchanged() -> None:
    # one comparison of 22 beside a hog on the Intel VM (µs, each process's fastest round): the
    # medians differ by 20% and Welch's test of any change gave p 0.04; the head's runs have the
    # slow tail, not a slower floor, and a change beyond 10% is not shown
    figures = {
        "test_doubled": ([187.5, 192.3, 186.5, 184.2, 204.8], [403.4, 522.8, 453.6, 385.1, 490.3]),
        "test_fifth": ([188.4, 189.0, 191.6, 189.2, 180.3], [232.0, 276.8, 288.9, 224.1, 240.8]),
        "test_same": ([183.0, 186.9, 192.8, 183.2, 186.6], [190.6, 224.5, 231.5, 182.8, 256.1]),
    }
    base = ab._timings({k: [x * 1e-6 for x in b] for k, (b, _) in figures.items()})
    head = ab._timings({k: [x * 1e-6 for x in h] for k, (_, h) in figures.items()})
    verdicts = {c.name: c for c in ab.judge(base, head).comparisons}
    assert verdicts["test_same"].verdict == "unchanged" and verdicts["test_same"].change > 0.2
    assert verdicts["test_doubled"].verdict == "regressed" and verdicts["test_fifth"].verdict == "regressed"
    assert verdicts["test_doubled"].change_ci[0] > 0.9


def test_history_file_rules(tmp_path: Path) -> None:
    bad = tmp_path / "h.json"
    bad.write_text("{not json")
    with pytest.raises(MaxcodeError, match="not a benchmark history .*delete it"):
        History.load(bad)
    h = History.load(tmp_path / "new.json")
    assert h.records == []
    for i in range(KEEP + 5):
        h.add(Record(f"c{i}", "main", "time", (), {"b": [float(i), float(i) + 2]}, processes="forked"))
    h.add(Record(f"c{KEEP + 4}", "main", "time", (), {"b": [100.0]}, processes="forked"))  # the same commit again: replaced
    h.save()
    again = History.load(h.path)
    assert len(again.records) == KEEP and again.records[-1].samples == {"b": [100.0]}
    assert again.trend("b", "main", "time", (), processes="forked", n=3) == [KEEP + 3.0, KEEP + 4.0, 100.0]  # medians of [i, i + 2]
    assert again.trend("b", "other", "time", (), processes="forked") == []
    assert again.trend("b", "main", "instructions", (), processes="forked") == []
    # figures of new interpreters are another way of measuring: neither a baseline nor a trend point of forked runs
    again.add(Record("c0", "main", "time", (), {"b": [7.0]}, processes="fresh"))
    assert again.find("c0", "time", (), processes="fresh").samples == {"b": [7.0]}
    assert again.find(f"c{KEEP + 4}", "time", (), processes="fresh") is None
    assert again.trend("b", "main", "time", (), processes="fresh") == [7.0]
    # a record written before the kind was kept came from a new interpreter per run, the default then
    old = json.loads(h.path.read_text())
    del old["records"][-1]["processes"]
    h.path.write_text(json.dumps(old))
    assert History.load(h.path).records[-1].processes == "fresh"
    assert sparkline([1, 2, 3, 8]) == "▁▂▃█" and sparkline([5, 5]) == "▄▄" and sparkline([]) == ""


def test_instruction_counts_are_reported_as_counts() -> None:
    base = {"b": Timings("b", 2.0e6, 2.0e6, 0.0, 1, None)}
    head = {"b": Timings("b", 2.5e6, 2.5e6, 0.0, 1, None)}
    result = ab.judge(base, head, timer="instructions")
    result.unit = "instructions"
    text = markdown(result)
    assert "| base (instructions) |" in text and "2 Minstr | 2.5 Minstr | +25.0%" in text and " s |" not in text


def test_a_pull_request_that_adds_the_first_benchmarks(tmp_path: Path) -> None:
    """No project folder at the base: every benchmark is new, not an error (the head's absence is one)."""
    r = git.Repo.init(tmp_path)
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t").set_value("user", "email", "t@example.com")
    (tmp_path / "README").write_text("x\n")
    r.index.add(["README"])
    r.index.commit("no benchmarks yet")
    r.create_tag("before")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "test_bench.py").write_text(BENCH.format(doubled=100, fifth=100))
    r.index.add(["proj/test_bench.py"])
    r.index.commit("benchmarks")
    said: list[str] = []
    base, head = ab.interleaved(tmp_path, "before", "HEAD", ARGS, runs=2, project="proj", progress=said.append)
    result = ab.judge(base, head)
    assert base == {} and result.comparisons == [] and len(result.only_head) == 3
    assert any("does not exist on the base: every benchmark counts as new" in m for m in said)
    with pytest.raises(MaxcodeError, match="does not exist on the head commit"):
        ab.interleaved(tmp_path, "HEAD", "before", ARGS, runs=2, project="proj")


RECORDING = '''
import os
import shape


def test_recorded(benchmark):
    with open(os.environ["MAXCODE_TEST_RECORD"], "a") as f:
        f.write(f"run {os.getpid()} {shape.VERSION} {shape.IMPORTED_IN}\\n")
    benchmark(sum, range(100))
'''
SHAPE = '''
import os

VERSION = "{version}"
IMPORTED_IN = os.getpid()
'''


def _two_commits(root: Path, files: dict[str, tuple[str, str]]) -> None:
    """A repository with ``base`` and ``head`` tags; ``files``: name -> (base text, head text)."""
    r = git.Repo.init(root)
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t").set_value("user", "email", "t@example.com")
    for i, tag in enumerate(("base", "head")):
        for name, texts in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(texts[i])
            r.index.add([name])
        r.index.commit(tag)
        r.create_tag(tag)
    r.close()


def test_every_run_is_its_own_process_importing_its_sides_code_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server may start pytest once per side, but each timed run is a new process that
    imports the project's own modules itself, from its own commit."""
    root, record = tmp_path / "repo", tmp_path / "record.txt"
    root.mkdir()
    _two_commits(root, {"test_rec.py": (RECORDING, RECORDING),
                        "shape.py": (SHAPE.format(version="base"), SHAPE.format(version="head"))})
    monkeypatch.setenv("MAXCODE_TEST_RECORD", str(record))
    base, head = ab.interleaved(root, "base", "head", ARGS, runs=3, fork_server=True)
    assert len(base["test_rec.py::test_recorded"].data) == len(head["test_rec.py::test_recorded"].data) == 3
    runs = [line.split()[1:] for line in record.read_text().splitlines()]
    assert [version for _, version, _ in runs] == ["base", "head", "head", "base", "base", "head"]  # ABBA
    pids = [pid for pid, _, _ in runs]
    assert len(set(pids)) == 6, runs
    assert all(pid == imported_in for pid, _, imported_in in runs), f"a run used a module imported before it: {runs}"


NO_FORK = '''
import os

del os.fork  # as where collecting initialises torch's CUDA: the server cannot fork a run
'''


def test_a_server_that_cannot_fork_hands_over_to_new_interpreters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server runs its first run as a new interpreter and says so; it then goes (it may hold a
    CUDA context), and the side's later runs start afresh from bench-ab itself."""
    root, record = tmp_path / "repo", tmp_path / "record.txt"
    root.mkdir()
    recording = RECORDING.replace("os.getpid()} {shape", "os.getpid()} {os.getppid()} {shape")
    _two_commits(root, {"test_rec.py": (recording, recording), "conftest.py": (NO_FORK, NO_FORK),
                        "shape.py": (SHAPE.format(version="base"), SHAPE.format(version="head"))})
    monkeypatch.setenv("MAXCODE_TEST_RECORD", str(record))
    ab.measure(root, {"base": "base", "head": "head"}, ARGS, runs=3)
    runs = [line.split()[1:] for line in record.read_text().splitlines()]
    assert [version for _, _, version, _ in runs] == ["base", "head", "head", "base", "base", "head"], runs
    parents = {version: [int(ppid) for _, ppid, v, _ in runs if v == version] for version in ("base", "head")}
    for version, (first, *later) in parents.items():
        assert first != os.getpid() and later == [os.getpid()] * 2, (version, runs)  # the server's, then bench-ab's own


def _processes_in(folder: Path) -> list[str]:
    """Command lines of the processes working in ``folder`` (or below it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder) in os.readlink(proc / "cwd"):
                found.append((proc / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue
    return found


HANGS = '''
import time


def test_hangs(benchmark):
    benchmark(time.sleep, 3600)
'''


def test_a_run_that_hangs_ends_in_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    _two_commits(root, {"test_hang.py": (HANGS, HANGS)})
    with pytest.raises(MaxcodeError, match=r"^bench-ab: the base's benchmarks did not finish within 3 s$"):
        ab.measure(root, {"base": "base", "head": "head"}, ARGS, runs=2, timeout_s=3, fork_server=True)
    assert not _processes_in(root), "a server or a run outlived bench-ab"
    with pytest.raises(MaxcodeError, match=r"^bench-ab: the base's benchmarks did not finish within 3 s$"):
        ab.measure(root, {"base": "base", "head": "head"}, ARGS, runs=2, timeout_s=3, fork_server=False)  # a new interpreter per run
    assert not _processes_in(root), "a run outlived bench-ab"
    assert not [ln for ln in git.Repo(root).git.worktree("list").splitlines()[1:]]
