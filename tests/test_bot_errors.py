"""GitHub failing the bot (issue 15): a persistent 5xx, an exhausted rate limit that resets in two
hours and an API that never answers each end ``maxcode pr`` as one line in bounded time, with no
traceback and no PyGithub log line; a short rate-limit wait is sat out and announced."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import github_fake
import pytest

fake_github = github_fake.fake_github

REPORT = {"targets": [{"id": "mylib.f", "status": "verified", "verified": True, "reason": "faster", "speedup": 2.0,
                       "speedup_ci": [1.8, 2.2], "best": {"source_path": "k.cpp", "lang": "cpp"},
                       "reference": {"file": "mylib.py", "qualname": "f", "hash": "r"}}]}


def maxcode(cwd: Path, fake: Any, *args: str, timeout_s: str = "2") -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_"))}
    env.update(fake.env(), MAXCODE_GITHUB_WRITE_INTERVAL="0", MAXCODE_GITHUB_TIMEOUT=timeout_s)
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=cwd, capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    return r, time.monotonic() - start


@pytest.fixture
def report(tmp_path: Path) -> Path:
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    return tmp_path


@pytest.mark.parametrize(("fault", "line", "bound"), [
    (lambda f: f.fail(500, times=100), r"opening acme/mylib: GitHub answered 500 \(server error\) 4 times in a row; try again later", 30),
    (lambda f: f.fail(403, times=100, reset_in=7200),
     (r"opening acme/mylib: GitHub's rate limit is exhausted until \d\d:\d\d:\d\d UTC \(in (2 h 0 min|119 min)\) \(more than --max-wait\); "
     r"run again after it resets"), 10),
    (lambda f: f.fail(429, times=100, retry_after=3600),
     (r"opening acme/mylib: GitHub's rate limit is exhausted until \d\d:\d\d:\d\d UTC \(in 60 min\) \(more than --max-wait\); "
     r"run again after it resets"), 10),
    (lambda f: f.hang(60, times=100),
     r"opening acme/mylib: GitHub did not answer within 2 s \(tried twice\); try again later, or raise MAXCODE_GITHUB_TIMEOUT", 20),
], ids=["persistent-500", "rate-limit-2h", "secondary-rate-limit-1h", "hung"])
def test_github_failures_are_one_line_in_bounded_time(report: Path, fake_github: Any, fault: Any, line: str, bound: float) -> None:
    fault(fake_github)
    r, elapsed = maxcode(report, fake_github, "pr", "report.json", "--repo", "acme/mylib")
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert re.fullmatch(f"maxcode: error: {line}\n", r.stderr), r.stderr
    assert elapsed < bound, elapsed
    assert github_fake.FAKE_GH_TOKEN not in r.stderr


def test_a_short_rate_limit_wait_is_announced_then_the_call_goes_on(tmp_path: Path, fake_github: Any) -> None:
    number = fake_github.add_pull("feature")
    (tmp_path / "c.md").write_text("### numbers\n")
    fake_github.fail(403, reset_in=2)
    r, elapsed = maxcode(tmp_path, fake_github, "comment", "c.md", "--pr", str(number))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("created ")
    assert re.fullmatch(r"maxcode: GitHub's rate limit: waiting \d s, until \d\d:\d\d:\d\d UTC "
                        r"\(waits longer than --max-wait 5 min end the run instead\)\n", r.stderr), r.stderr
    assert 1 <= elapsed < 30
    # a wait longer than the caller allows ends the command in one line instead
    fake_github.fail(403, reset_in=120)
    r, elapsed = maxcode(tmp_path, fake_github, "comment", "c.md", "--pr", str(number), "--max-wait", "10")
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert re.fullmatch(r"maxcode: error: .*rate limit is exhausted until .*\(more than --max-wait\).*\n", r.stderr), r.stderr
    assert elapsed < 30, elapsed
