"""``maxcode pr`` and ``maxcode comment`` end to end: a report of the bundled example (in the
report's schema), a real git checkout with a bare repository as ``origin``, and the fake GitHub
REST API on 127.0.0.1 reached through PyGithub."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import github_fake
import pytest
import tomllib
from bot_project import make_repo, tune
from github_fake import FAKE_GH_TOKEN

from pytest_maxcode.report import validate

TARGET = "mylib.fused_chain"
BRANCH = f"maxcode/optimize-{TARGET}"
fake_github = github_fake.fake_github


def maxcode(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_"))}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=full, timeout=300, check=False)


def report_kernel(work: Path) -> str:
    return (work / ".maxcode" / "reports" / "kernels" / f"{TARGET}.cpp").read_text()


def gh_env(fake: Any, token: str = FAKE_GH_TOKEN) -> dict[str, str]:
    return {"GITHUB_TOKEN": token, "GITHUB_API_URL": fake.url, "MAXCODE_GITHUB_WRITE_INTERVAL": "0"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example as a git checkout of acme/mylib (origin: a bare repository), and a verified report
    of it in the schema ``pytest --maxcode`` writes (the bot only reads the report: no search here,
    whose verdict on a loaded 2-core machine is not what these tests are about)."""
    r = make_repo(tmp_path_factory.mktemp("bot"))
    report = r.report(tune(0), 2.33, (1.31, 4.14))
    assert validate(report) == []
    return r.top, r.origin


def test_a_report_becomes_a_branch_a_commit_and_a_pr_then_an_update(project: tuple[Path, Path], fake_github: Any) -> None:
    work, origin = project
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", "--label", "performance", "--urls-file", "urls.txt",
                "--author", "Perf Bot <perf@example.com>", env=gh_env(fake_github))
    assert r.returncode == 0, r.stdout + r.stderr
    (pr,) = fake_github.pulls.values()
    url = f"{fake_github.url}/acme/mylib/pull/{pr['number']}"
    assert r.stdout.startswith(f"{TARGET}: opened {url} (")
    assert (work / "urls.txt").read_text() == url + "\n"
    # the branch: one commit by the bot on top of main, the kernel and the lock, nothing else
    bare = git.Repo(origin)
    commit = bare.commit(BRANCH)
    assert commit.parents[0] == bare.commit("main")
    assert (commit.author.name, commit.author.email) == ("Perf Bot", "perf@example.com")
    assert sorted(commit.stats.files) == ["maxcode.lock", f"maxcode_kernels/{TARGET}.cpp"]
    assert (commit.tree / f"maxcode_kernels/{TARGET}.cpp").data_stream.read().decode() in report_kernel(work)
    assert commit.message.startswith(f"⚡ Speed up {TARGET} ")
    lock = tomllib.loads((commit.tree / "maxcode.lock").data_stream.read().decode())
    assert lock["targets"][TARGET]["kernel"] == f"maxcode_kernels/{TARGET}.cpp"
    # the pull request a reviewer reads
    assert pr["title"].startswith(f"⚡ Speed up {TARGET} ") and pr["title"].endswith("x (C++, CPU)")
    assert pr["head"] == BRANCH and pr["base"] == "main" and pr["labels"] == ["performance"] and pr["state"] == "open"
    body = pr["body"]
    report = json.loads((work / "report.json").read_text())["targets"][0]
    for needle in (f"<!-- maxcode:pr target={TARGET} kernel=", f"**{report['speedup']:.3g}x**", "| workload | original | optimized |",
                   "### Your benchmarks (pytest-benchmark", "tests/test_mylib.py::test_benchmark_chain",
                   "### Tests re-run with the kernel active", "✅", "torch ", "strategy `sweep`",
                   "<details><summary>Kernel source", "extern \"C\" int maxcode_run", f"git checkout -B {BRANCH} FETCH_HEAD"):
        assert needle in body, needle
    # the user's checkout is untouched: no lock, no kernel, no leftover worktree
    assert not (work / "maxcode.lock").exists() and not (work / "maxcode_kernels" / f"{TARGET}.cpp").exists()
    assert git.Repo(work).git.worktree("list").count("\n") == 0
    # a second run updates the same pull request
    first_sha = commit.hexsha
    again = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", "--label", "performance", env=gh_env(fake_github))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith(f"{TARGET}: updated {url}")
    assert len(fake_github.pulls) == 1 and len(fake_github.requests_to("POST", r"/pulls$")) == 1
    assert fake_github.requests_to("PATCH", rf"/pulls/{pr['number']}$")
    # the same kernel: the commit (and any review comments on it) stays, the numbers are refreshed
    assert git.Repo(origin).commit(BRANCH).hexsha == first_sha


def test_a_pr_closed_without_merging_is_not_reopened_for_the_same_kernel(project: tuple[Path, Path], fake_github: Any) -> None:
    work, _ = project
    assert maxcode(work, "pr", "report.json", "--repo", "acme/mylib", env=gh_env(fake_github)).returncode == 0
    (number,) = fake_github.pulls
    fake_github.close_pull(number)
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", env=gh_env(fake_github))
    assert r.returncode == 0, r.stderr
    url = f"{fake_github.url}/acme/mylib/pull/{number}"
    assert r.stdout == (f"{TARGET}: skipped (#{number} with this very kernel was closed without merging ({url}); "
                        f"to lift it: reopen #{number}, or change the reference)\n")
    assert len(fake_github.pulls) == 1 and fake_github.pulls[number]["state"] == "closed"


def test_weak_check_and_unverified_results_open_nothing(project: tuple[Path, Path], fake_github: Any, tmp_path: Path) -> None:
    work, origin = project
    report = json.loads((work / "report.json").read_text())
    before = {h.name: h.commit.hexsha for h in git.Repo(origin).heads}
    report["targets"][0]["weak_check"] = True
    (work / "weak.json").write_text(json.dumps(report))
    r = maxcode(work, "pr", "weak.json", "--repo", "acme/mylib", env=gh_env(fake_github))
    assert r.returncode == 0 and "skipped (the correctness check was weak" in r.stdout
    report["targets"][0].update(weak_check=False, status="not_verified", verified=False, reason="a test failed with the kernel")
    (work / "unverified.json").write_text(json.dumps(report))
    r = maxcode(work, "pr", "unverified.json", "--repo", "acme/mylib", env=gh_env(fake_github))
    assert r.stdout == f"{TARGET}: skipped (not verified (not_verified: a test failed with the kernel))\n"
    assert fake_github.requests == [] and fake_github.pulls == {}
    assert {h.name: h.commit.hexsha for h in git.Repo(origin).heads} == before


def test_dry_run_needs_no_token_and_touches_nothing(project: tuple[Path, Path], fake_github: Any) -> None:
    work, origin = project
    before = {h.name: h.commit.hexsha for h in git.Repo(origin).heads}
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{TARGET}: would open or update: branch {BRANCH} onto main\n\n# ⚡ Speed up {TARGET}")
    assert fake_github.requests == [] and {h.name: h.commit.hexsha for h in git.Repo(origin).heads} == before


def test_the_token_never_appears_in_output_files_or_errors(project: tuple[Path, Path], fake_github: Any) -> None:
    work, origin = project
    ok = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", "--urls-file", "urls.txt", env=gh_env(fake_github))
    wrong = "ghp_" + "W" * 36
    bad = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", env=gh_env(fake_github, token=wrong))
    assert bad.returncode == 2
    assert bad.stderr == "maxcode: error: opening acme/mylib: the token was rejected (401): check GITHUB_TOKEN\n"
    missing = maxcode(work, "pr", "report.json", "--repo", "acme/mylib")
    assert missing.returncode == 2 and "no GitHub token: set GITHUB_TOKEN" in missing.stderr
    for text in (ok.stdout, ok.stderr, bad.stdout, bad.stderr):
        assert FAKE_GH_TOKEN not in text and wrong not in text
    for root in (work, origin):
        for f in root.rglob("*"):
            if f.is_file() and f.stat().st_size < 5_000_000:
                assert FAKE_GH_TOKEN.encode() not in f.read_bytes(), f
    for pr in fake_github.pulls.values():
        assert FAKE_GH_TOKEN not in pr["body"]


def test_bad_arguments_are_one_line(project: tuple[Path, Path], tmp_path: Path) -> None:
    work, _ = project
    r = maxcode(work, "pr", "report.json", "--repo", "not a repo", env={"GITHUB_TOKEN": "x"})
    assert r.returncode == 2 and r.stderr == "maxcode: error: --repo 'not a repo': give the repository as OWNER/NAME (or set GITHUB_REPOSITORY)\n"
    r = maxcode(work, "pr", "missing.json", "--repo", "acme/mylib")
    assert r.returncode == 2 and "missing.json: no such report; run pytest --maxcode first" in r.stderr
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", "--author", "nobody", "--dry-run")
    assert r.returncode == 2 and "--author 'nobody': write it as 'Name <email>'" in r.stderr
    shutil.copy(work / "report.json", tmp_path / "report.json")
    r = maxcode(tmp_path, "pr", "report.json", "--repo", "acme/mylib", env={"GITHUB_TOKEN": "x", "GITHUB_API_URL": "http://127.0.0.1:9"})
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr


def test_the_regression_comment_is_created_once_then_edited(fake_github: Any, tmp_path: Path) -> None:
    number = fake_github.add_pull("feature", title="A change")
    (tmp_path / "first.md").write_text("### ⏱ Performance: **1 regression**\n")
    (tmp_path / "second.md").write_text("### ⏱ Performance: **No regressions**\n")
    fake_github.add_comment(number, "a human's comment", user="someone")
    env = dict(gh_env(fake_github), GITHUB_REPOSITORY="acme/mylib")
    first = maxcode(tmp_path, "comment", "first.md", "--pr", str(number), env=env)
    assert first.returncode == 0, first.stderr
    second = maxcode(tmp_path, "comment", "second.md", "--pr", str(number), env=env)
    assert second.returncode == 0, second.stderr
    mine = [c for c in fake_github.comments_on(number) if "maxcode:regressions" in c["body"]]
    assert len(mine) == 1 and mine[0]["body"] == "<!-- maxcode:regressions -->\n### ⏱ Performance: **No regressions**\n"
    assert first.stdout.startswith("created ") and second.stdout == first.stdout.replace("created ", "updated ")
    assert len(fake_github.comments_on(number)) == 2  # the human's comment is untouched
    assert FAKE_GH_TOKEN not in first.stdout + first.stderr + second.stdout + second.stderr


def test_a_comment_over_githubs_cap_is_cut_to_fit_and_the_fake_refuses_longer(fake_github: Any, tmp_path: Path) -> None:
    """GitHub answers 422 to a comment over 65,536 characters (the fake does too, through the real
    client): a regression table of thousands of rows is posted cut, its marker first."""
    import github as pygithub

    number = fake_github.add_pull("feature", title="A change")
    gh = pygithub.Github(base_url=fake_github.url, auth=pygithub.Auth.Token(FAKE_GH_TOKEN))
    with pytest.raises(pygithub.GithubException) as refused:
        gh.get_repo("acme/mylib").get_issue(number).create_comment("x" * 65_537)
    assert refused.value.status == 422 and "body is too long (maximum is 65536 characters)" in str(refused.value)
    rows = "".join(f"| `tests/test_perf.py::test_case_{i}` | 1.00 ms | 1.20 ms | 1.20x slower |\n" for i in range(3000))
    (tmp_path / "big.md").write_text("### ⏱ Performance: **3000 regressions**\n\n| test | base | head | change |\n|---|---|---|---|\n" + rows)
    env = dict(gh_env(fake_github), GITHUB_REPOSITORY="acme/mylib")
    done = maxcode(tmp_path, "comment", "big.md", "--pr", str(number), env=env)
    assert done.returncode == 0, done.stderr
    (mine,) = [c for c in fake_github.comments_on(number) if "maxcode:regressions" in c["body"]]
    assert len(mine["body"]) <= 65_536 and mine["body"].startswith("<!-- maxcode:regressions -->\n### ⏱ Performance")
    assert "GitHub caps a comment at 65,536 characters" in mine["body"] and "test_case_100`" in mine["body"]
