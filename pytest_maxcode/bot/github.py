"""The GitHub client the bot uses: PyGithub with the token from the environment, and errors
as one line that never carries the token.

The token is read from ``GITHUB_TOKEN`` (or ``GH_TOKEN``), never from a command-line
argument (argv is visible to every process on the machine and lands in shell history),
and the API URL from ``GITHUB_API_URL`` (set by Actions; GitHub Enterprise) or
``--github-url``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .._extras import require
from ..errors import MaxcodeError

TOKEN_VARS = ("GITHUB_TOKEN", "GH_TOKEN")
DEFAULT_API = "https://api.github.com"


def token_from_env() -> str:
    for var in TOKEN_VARS:
        if os.environ.get(var):
            return os.environ[var]
    raise MaxcodeError("no GitHub token: set GITHUB_TOKEN (in a workflow: env: GITHUB_TOKEN: ${{ github.token }})")


def scrub(text: str, *secrets: str) -> str:
    """The text with every secret (and anything shaped like a GitHub token) replaced."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return re.sub(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b", "***", text)


def pygithub() -> Any:
    return require("github", "talking to GitHub (maxcode pr, maxcode comment)")


def client(api_url: str | None = None) -> tuple[Any, str]:
    """A PyGithub client and the token it uses (so messages can be scrubbed of it)."""
    github = pygithub()

    token = token_from_env()
    url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    # GitHub asks integrations to space their writes (secondary rate limits); a test server
    # does not need it: MAXCODE_GITHUB_WRITE_INTERVAL=0
    interval = float(os.environ.get("MAXCODE_GITHUB_WRITE_INTERVAL", "1.0"))
    gh = github.Github(auth=github.Auth.Token(token), base_url=url, timeout=30, retry=github.GithubRetry(total=3),
                       seconds_between_requests=0, seconds_between_writes=interval)
    return gh, token


def error(e: BaseException, doing: str, token: str = "") -> MaxcodeError:
    """One line for a failed API call: what was being done, the status, GitHub's message."""
    github = pygithub()

    if isinstance(e, github.BadCredentialsException):
        why = "the token was rejected (401): check GITHUB_TOKEN"
    elif isinstance(e, github.RateLimitExceededException):
        why = "GitHub's rate limit is exhausted; try again after it resets"
    elif isinstance(e, github.UnknownObjectException):
        why = "not found (404): check --repo, and that the token can see the repository"
    elif isinstance(e, github.GithubException):
        data = e.data if isinstance(e.data, dict) else {}
        message = str(data.get("message") or e.data or "")
        details = "; ".join(str(x.get("message") or x.get("code") or x) for x in data.get("errors") or [] if isinstance(x, dict))
        why = f"GitHub answered {e.status}: {message}" + (f" ({details})" if details else "")
        if e.status == 403 and "not accessible" in message.lower():
            why += "; the workflow needs permissions: pull-requests: write (and contents: write to push)"
    else:
        why = f"{type(e).__name__}: {e}"
    return MaxcodeError(scrub(f"{doing}: {why}", token))
