"""``maxcode comment``: one comment per pull request, found again by a hidden marker and
edited in place, so a PR that is pushed ten times still has one performance comment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .github import error, fit, pygithub

DEFAULT_MARKER = "maxcode:regressions"


def marker_line(name: str) -> str:
    return f"<!-- {name} -->"


@dataclass
class Posted:
    url: str
    created: bool
    comment_id: int


def upsert_comment(gh: Any, repo_name: str, number: int, body: str, *, marker: str = DEFAULT_MARKER, token: str = "") -> Posted:
    github = pygithub()
    tag = marker_line(marker)
    text = fit(f"{tag}\n{body}", "<sub>(cut here: GitHub caps a comment at 65,536 characters; the job's report has the rest)</sub>")
    try:
        issue = gh.get_repo(repo_name).get_issue(number)
        for c in issue.get_comments():
            if tag in (c.body or ""):
                if c.body != text:
                    c.edit(text)
                return Posted(c.html_url, False, c.id)
        c = issue.create_comment(text)
    except (github.GithubException, OSError) as e:
        raise error(e, f"commenting on {repo_name}#{number}", token) from None
    return Posted(c.html_url, True, c.id)
