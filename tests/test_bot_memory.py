"""The bot across runs (issue 15): what reviewers said is remembered per target, and the merged
kernel is the baseline. Real git repositories (a bare origin), the fake GitHub on 127.0.0.1
through PyGithub, and reports written by hand (the bot only reads them)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import github_fake
import pytest
from bot_project import BRANCH, TARGET, Repo, make_repo, tune

from pytest_maxcode.bot import memory
from pytest_maxcode.bot.pr import Bot, Outcome
from pytest_maxcode.search.policy import BuiltinPolicy, TargetInfo

fake_github = github_fake.fake_github


@pytest.fixture
def repo(tmp_path: Path, fake_github: Any, monkeypatch: pytest.MonkeyPatch) -> Repo:
    for k, v in {"GITHUB_TOKEN": github_fake.FAKE_GH_TOKEN, "GITHUB_API_URL": fake_github.url,
                 "MAXCODE_GITHUB_WRITE_INTERVAL": "0"}.items():
        monkeypatch.setenv(k, v)
    return make_repo(tmp_path)


def run(r: Repo, report: dict[str, Any], **kwargs: Any) -> Outcome:
    (outcome,) = Bot(r.project, report, repo_name="acme/mylib", base=None, **kwargs).run()
    return outcome


def test_a_closed_pr_holds_the_target_until_the_reference_changes_or_a_clearly_faster_kernel(repo: Repo, fake_github: Any) -> None:
    first = run(repo, repo.report(tune(0), 3.0, (2.7, 3.3)))
    assert first.action == "opened", first.line()
    (one,) = fake_github.pulls
    fake_github.close_pull(one)
    # another tune setting of the same seed, a little faster by timing noise: nothing new
    again = run(repo, repo.report(tune(3), 3.2, (2.9, 3.5)))
    assert again.action == "skipped" and f"#{one} (a 3x kernel) was closed without merging" in again.detail, again.line()
    assert "to lift it: reopen" in again.detail and "3.75x or more" in again.detail
    assert list(fake_github.pulls) == [one] and not fake_github.requests_to("POST", r"/pulls$")[1:]
    (line,) = memory.status_lines(repo.project)
    assert line.startswith(f"{TARGET}: no new pull request: #{one}") and "to lift it" in line and "acme/mylib main" in line
    status = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "status"], cwd=repo.project,
                            capture_output=True, text=True, timeout=120)
    assert line in status.stdout, status.stdout + status.stderr  # maxcode status says it too
    as_json = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", "status", "--json"], cwd=repo.project,
                             capture_output=True, text=True, timeout=120)
    assert line in as_json.stderr and isinstance(json.loads(as_json.stdout), list), as_json.stdout + as_json.stderr
    # the reference changed: the rejection no longer stands
    repo.change_reference()
    changed = run(repo, repo.report(tune(3), 3.2, (2.9, 3.5)))
    assert changed.action == "opened", changed.line()
    two = max(fake_github.pulls)
    assert memory.status_lines(repo.project) == []
    fake_github.close_pull(two)
    # 1.5 times the rejected kernel (interval low end 1.5 x 3.2): a new pull request
    faster = run(repo, repo.report(tune(4), 4.9, (4.8, 5.0)))
    assert faster.action == "opened", faster.line()
    three = max(fake_github.pulls)
    assert three != two and fake_github.pulls[three]["state"] == "open"
    # a margin of 2 holds that one back too
    stricter = run(repo, repo.report(tune(5), 4.9, (4.8, 5.0)), reject_margin=2.0)
    assert stricter.action == "updated"  # an open PR is updated, whatever was closed before it
    fake_github.pulls[three]["labels"].append("maxcode:never")
    fake_github.close_pull(three)
    repo.change_reference()
    never = run(repo, repo.report(tune(1), 50.0, (45.0, 55.0)))
    assert never.action == "skipped" and "label maxcode:never" in never.detail
    assert f"remove the label maxcode:never from #{three}" in memory.status_lines(repo.project)[0]


def test_the_same_kernel_returns_after_the_reference_changed_and_the_margin_is_the_callers(repo: Repo, fake_github: Any) -> None:
    assert run(repo, repo.report(tune(0), 3.0, (2.7, 3.3))).action == "opened"
    (one,) = fake_github.pulls
    fake_github.close_pull(one)
    same = run(repo, repo.report(tune(0), 3.0, (2.7, 3.3)))
    assert same.action == "skipped" and "with this very kernel was closed" in same.detail, same.line()
    # the reviewers judged it against another reference: the same kernel may be proposed again
    repo.change_reference()
    back = run(repo, repo.report(tune(0), 3.0, (2.7, 3.3)))
    assert back.action == "opened", back.line()
    two = max(fake_github.pulls)
    fake_github.close_pull(two)
    # low end 4.0 clears the default margin (1.25 x 3 = 3.75) but not a margin of 1.5 (4.5)
    held = run(repo, repo.report(tune(4), 4.2, (4.0, 4.4)), reject_margin=1.5)
    assert held.action == "skipped" and "below 4.5x (1.5 times the rejected one)" in held.detail, held.line()
    assert max(fake_github.pulls) == two
    assert run(repo, repo.report(tune(4), 4.2, (4.0, 4.4))).action == "opened"


def _merged(repo: Repo, fake_github: Any) -> int:
    """The bot's first PR (a 3x kernel), merged on main: the lock there accepts it."""
    opened = run(repo, repo.report(tune(0), 3.0, (2.7, 3.3)))
    assert opened.action == "opened", opened.line()
    (one,) = fake_github.pulls
    repo.merge()
    fake_github.close_pull(one, merged=True)
    git.Repo(repo.top).git.checkout("main")
    return one


def test_the_merged_kernel_is_the_baseline(repo: Repo, fake_github: Any) -> None:
    one = _merged(repo, fake_github)
    # the next search starts from the merged kernel: the built-in proposer's first candidate
    target = TargetInfo(TARGET, "mylib", "fused_chain", repo.project / "mylib.py", "function", "cpp")
    first = BuiltinPolicy(target, repo.project, "cpu", torch_compile=False).proposals()[0]
    assert first.origin == f"accepted:maxcode_kernels/{TARGET}.cpp" and first.spec.text == tune(0)
    # the same kernel, and a slower one (a torch.compile wrapper measured against the original): nothing
    same = run(repo, repo.report(tune(0), 3.1, (2.8, 3.4)))
    assert same.action == "skipped" and "already accepted on main" in same.detail
    slower = run(repo, repo.report(tune(3), 2.27, (2.0, 2.5)))
    assert slower.action == "skipped" and "not clearly faster than the kernel accepted on the base branch (3x, as its lock entry quotes it" in slower.detail
    barely = run(repo, repo.report(tune(3), 3.4, (3.2, 3.6)))
    assert barely.action == "skipped", barely.line()  # 3.2 < 1.1 x 3
    assert list(fake_github.pulls) == [one]
    faster = run(repo, repo.report(tune(3), 4.5, (4.0, 5.0)))
    assert faster.action == "opened" and "replaces the accepted 3x" in faster.detail, faster.line()
    pr = fake_github.pulls[max(fake_github.pulls)]
    assert pr["title"] == f"⚡ Replace the accepted kernel of {TARGET}: 3x -> 4.5x (C++, CPU)"
    body = pr["body"]
    for needle in ("**replaces**", "| | accepted now (replaced) | this pull request |", "| 3x [2.7, 3.3] | **4.5x** [4, 5] |",
                   "The accepted kernel it replaces", "What changed (diff, accepted -> new)", "-#define UNROLL 1", "+#define UNROLL 4"):
        assert needle in body, needle
    message = git.Repo(repo.origin).commit(BRANCH).message
    assert message.startswith(pr["title"] + "\n") and "4.5x (95% CI [4, 5])" in message and "Replaces the accepted kernel" in message
    # new numbers for the same kernel: title, body and commit message all quote them
    again = run(repo, repo.report(tune(3), 4.7, (4.2, 5.2)))
    assert again.action == "updated", again.line()
    pr = fake_github.pulls[max(fake_github.pulls)]
    message = git.Repo(repo.origin).commit(BRANCH).message
    assert "4.7x" in pr["title"] and "**4.7x** [4.2, 5.2]" in pr["body"] and message.startswith(pr["title"] + "\n")
    assert "4.7x (95% CI [4.2, 5.2])" in message and "4.5x" not in message


def _beside(report: dict[str, Any], speedup: float, ci: tuple[float, float], source: str = tune(0),
            resumed: bool = False) -> dict[str, Any]:
    """The report as a search that started from the merged kernel writes it: that kernel's own
    node, measured again in the same run as the new one (``resumed``: taken from the store)."""
    h = hashlib.sha256(f"native\0cpp\0{source}".encode()).hexdigest()
    report["targets"][0]["trajectory"] = [{"index": 1, "hash": h, "origin": f"accepted:maxcode_kernels/{TARGET}.cpp",
                                           "status": "faster", "speedup": speedup, "speedup_ci": list(ci),
                                           "resumed": resumed}]
    return report


def test_the_merged_kernel_is_timed_head_to_head_where_the_search_measured_it(repo: Repo, fake_github: Any) -> None:
    """The lock quotes 3x from another day; this run measured the merged kernel at 4.2x beside
    the new one. The bar is the same-run figure, not the old quote."""
    _merged(repo, fake_github)
    # clears 1.1 x the quoted 3x, but not the merged kernel measured beside it: held
    held = run(repo, _beside(repo.report(tune(3), 4.5, (4.3, 4.7)), 4.2, (4.0, 4.4)))
    assert held.action == "skipped" and "measured beside it in this run (4.2x [4, 4.4])" in held.detail, held.line()
    assert "not above 4.62x" in held.detail
    # the node of another kernel (a stale lock in the checkout) is no head-to-head figure: the quote decides
    other = run(repo, _beside(repo.report(tune(3), 4.5, (4.3, 4.7)), 4.2, (4.0, 4.4), source=tune(2)))
    assert other.action == "opened" and "replaces the accepted 3x" in other.detail, other.line()
    assert "not in this run" in fake_github.pulls[max(fake_github.pulls)]["body"]
    # its figure taken from the store was measured another day: not this run's bar either
    stored = run(repo, _beside(repo.report(tune(3), 4.5, (4.3, 4.7)), 4.2, (4.0, 4.4), resumed=True))
    assert stored.action == "updated" and "replaces the accepted 3x" in stored.detail, stored.line()
    faster = run(repo, _beside(repo.report(tune(3), 6.0, (5.5, 6.5)), 4.2, (4.0, 4.4)))
    assert faster.action == "updated" and "replaces the accepted 4.2x" in faster.detail, faster.line()
    pr = fake_github.pulls[max(fake_github.pulls)]
    assert pr["title"] == f"⚡ Replace the accepted kernel of {TARGET}: 4.2x -> 6x (C++, CPU)"
    for needle in ("one beside the other", "| 4.2x [4, 4.4] | **6x** [5.5, 6.5] |", "its lock entry quotes 3x"):
        assert needle in pr["body"], needle
    assert "Replaces the accepted kernel" in git.Repo(repo.origin).commit(BRANCH).message
    assert "(4.2x in the same run): 1.43x faster than it." in git.Repo(repo.origin).commit(BRANCH).message


def test_older_markers_hold_back_only_their_own_kernel() -> None:
    """A PR opened before markers carried the reference and the speedup: the same kernel stays held
    back (as before), another one is judged on its own."""
    from pytest_maxcode.bot.pr_body import marker, numbers, parse_marker_fields

    old = "<!-- maxcode:pr target=m.f kernel=00aa -->\nbody"
    assert parse_marker_fields(old) == {"target": "m.f", "kernel": "00aa"}
    new = marker("m.f", "11bb", reference="r1", nums=numbers({"speedup": 3.0, "speedup_ci": [2.5, 3.5]}))
    assert parse_marker_fields(new) == {"target": "m.f", "kernel": "11bb", "reference": "r1", "speedup": "3", "low": "2.5"}
    legacy = [memory.Rejection(7, "u", "00aa", "", None, False)]
    assert memory.suppression("m.f", kernel_hash="00aa", reference="r1", low=9.0, found=legacy) is not None
    assert memory.suppression("m.f", kernel_hash="22cc", reference="r1", low=1.1, found=legacy) is None
