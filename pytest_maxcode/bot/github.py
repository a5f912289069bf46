"""The GitHub client the bot uses: PyGithub with the token from the environment, bounded waits,
and errors as one line that never carries the token.

The token is read from ``GITHUB_TOKEN`` (or ``GH_TOKEN``), never from a command-line
argument (argv is visible to every process on the machine and lands in shell history),
and the API URL from ``GITHUB_API_URL`` (set by Actions; GitHub Enterprise) or
``--github-url``.

Every wait is bounded: one request waits at most ``timeout`` seconds for an answer (and is
tried at most twice); a 5xx is retried three times with a short backoff; a rate limit is
waited out only when it resets within ``max_wait`` seconds, and the wait is announced on
stderr. Past those bounds the call ends as one :class:`GitHubUnavailable` line that names
the bound (or the reset time). PyGithub's and urllib3's own log lines are kept off stderr.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from .._extras import require
from ..errors import MaxcodeError

if TYPE_CHECKING:
    from github import Github

TOKEN_VARS = ("GITHUB_TOKEN", "GH_TOKEN")
DEFAULT_API = "https://api.github.com"
#: seconds one request may wait for GitHub's answer (``MAXCODE_GITHUB_TIMEOUT`` overrides)
DEFAULT_TIMEOUT = 15.0
#: the longest rate-limit wait the bot sits out before giving up (``--max-wait``)
DEFAULT_MAX_WAIT = 300.0
SERVER_RETRIES = 3


class GitHubUnavailable(MaxcodeError):
    """GitHub cannot be used for now (5xx, rate limit, no answer): the run stops trying, rather
    than failing the same way once per target."""


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


def pygithub() -> ModuleType:
    return require("github", "talking to GitHub (maxcode pr, maxcode comment)")


def _quiet_logs() -> None:
    """PyGithub logs each retry and urllib3 each broken connection; with no handler configured
    Python prints warnings on stderr. The bot says what happened in its own one line instead."""
    for name in ("github", "urllib3"):
        log = logging.getLogger(name)
        log.propagate = False
        for h in list(log.handlers):  # PyGithub adds a StreamHandler to stderr at import
            if type(h) is logging.StreamHandler:
                log.removeHandler(h)
        if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
            log.addHandler(logging.NullHandler())


def clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch))


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    m = round(s / 60)
    return f"{m} min" if m < 90 else f"{m // 60} h {m % 60} min"


class WaitTooLong(TimeoutError):
    """Raised from inside a retry when GitHub asks for a longer wait than ``max_wait``. An
    ``OSError`` so that requests wraps it like any transport failure and every caller that
    already catches those (``maxcode comment`` too) turns it into its one line."""

    def __init__(self, wait: float, status: int) -> None:
        super().__init__(f"GitHub asked for a {_duration(wait)} wait")
        self.wait, self.status, self.reset = wait, status, time.time() + wait


def _retry_class() -> type:
    github = pygithub()

    class BoundedRetry(github.GithubRetry):  # type: ignore[misc, name-defined]
        """PyGithub's retry, with every rate-limit wait capped at ``max_wait`` and announced."""

        def __init__(self, *, max_wait: float = DEFAULT_MAX_WAIT, announce: Callable[[str], None] | None = None,
                     **kwargs: object) -> None:
            kwargs.setdefault("max_rate_limit_wait", max_wait)
            super().__init__(**kwargs)
            self.max_wait = max_wait
            self.announce = announce or _stderr

        def new(self, **kw: object) -> BoundedRetry:
            kw.update(max_wait=self.max_wait, announce=self.announce)
            return super().new(**kw)

        def sleep(self, response: object = None) -> None:
            after = self.get_retry_after(response) if response is not None and self.respect_retry_after_header else None
            wait = after if after else self.get_backoff_time()
            status = int(getattr(response, "status", 0) or 0)
            limited = bool(after) or status in (403, 429)
            if limited and wait > self.max_wait:
                raise WaitTooLong(wait, status)
            if limited and wait >= 1:
                self.announce(f"maxcode: GitHub's rate limit: waiting {_duration(wait)}, until {clock_time(time.time() + wait)} "
                              f"(waits longer than --max-wait {_duration(self.max_wait)} end the run instead)")
            if wait > 0:
                time.sleep(wait)

    return BoundedRetry


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def timeout_from_env() -> float:
    try:
        return float(os.environ.get("MAXCODE_GITHUB_TIMEOUT") or DEFAULT_TIMEOUT)
    except ValueError:
        raise MaxcodeError("MAXCODE_GITHUB_TIMEOUT: give the seconds as a number, e.g. 15") from None


def client(api_url: str | None = None, *, timeout: float | None = None, max_wait: float = DEFAULT_MAX_WAIT,
           announce: Callable[[str], None] | None = None) -> tuple[Github, str]:
    """A PyGithub client and the token it uses (so messages can be scrubbed of it). ``timeout``:
    seconds per request (default ``MAXCODE_GITHUB_TIMEOUT`` or 15); ``max_wait``: the longest
    rate-limit wait sat out; ``announce``: where a wait is announced (default stderr)."""
    github = pygithub()

    _quiet_logs()
    token = token_from_env()
    url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    # GitHub asks integrations to space their writes (secondary rate limits); a test server
    # does not need it: MAXCODE_GITHUB_WRITE_INTERVAL=0
    interval = float(os.environ.get("MAXCODE_GITHUB_WRITE_INTERVAL", "1.0"))
    seconds = max(1, math.ceil(timeout if timeout is not None else timeout_from_env()))  # PyGithub takes whole seconds
    retry = _retry_class()(total=SERVER_RETRIES, connect=1, read=1, backoff_factor=0.5, max_wait=max_wait,
                           announce=announce, secondary_rate_wait=60)
    gh = github.Github(auth=github.Auth.Token(token), base_url=url, timeout=seconds, retry=retry,
                       seconds_between_requests=0, seconds_between_writes=interval)
    gh.maxcode_timeout = seconds  # named in the message when GitHub does not answer
    return gh, token


def _reset_of(e: BaseException) -> float | None:
    """When an exhausted rate limit resets (epoch seconds), from the answer's headers."""
    headers = {str(k).lower(): v for k, v in (getattr(e, "headers", None) or {}).items()}
    value = str(headers.get("x-ratelimit-reset") or "")
    if value.isdigit():
        return float(value)
    wait = getattr(e, "wait", None)
    return time.time() + wait if wait else None


def _reasons(e: BaseException) -> list[BaseException]:
    """The exception, its causes and urllib3's ``reason``s: where a timeout hides in requests' wrappers."""
    seen: list[BaseException] = []
    todo: list[object] = [e]
    while todo:
        x = todo.pop()
        if not isinstance(x, BaseException) or any(x is s for s in seen):
            continue
        seen.append(x)
        todo += [x.__cause__, x.__context__, getattr(x, "reason", None), *[a for a in x.args if isinstance(a, BaseException)]]
    return seen


def _transport(e: BaseException, timeout: float | None) -> str | None:
    """One clause for a failure below HTTP (no answer, refused, 5xx retried out), or None."""
    chain = _reasons(e)
    names = {type(x).__name__ for x in chain}
    for x in chain:
        if isinstance(x, WaitTooLong):
            return _limit_text(x.reset, x.wait)
    if names & {"ReadTimeoutError", "ReadTimeout", "ConnectTimeoutError", "ConnectTimeout", "TimeoutError", "timeout"}:
        bound = f"{timeout:g} s" if timeout else "the timeout"
        return (f"GitHub did not answer within {bound} (tried twice); try again later, or raise MAXCODE_GITHUB_TIMEOUT")
    if "ResponseError" in names or "RetryError" in names:
        m = re.search(r"too many (\d{3}) error responses", " ".join(str(x) for x in chain))
        code = m.group(1) if m else "5xx"
        return f"GitHub answered {code} (server error) {SERVER_RETRIES + 1} times in a row; try again later"
    if "NewConnectionError" in names or "ConnectionRefusedError" in names:
        return "cannot connect to the GitHub API (connection refused); check GITHUB_API_URL / --github-url"
    return None


def _limit_text(reset: float | None, wait: float | None) -> str:
    when = f" until {clock_time(reset)} (in {_duration(reset - time.time())})" if reset else ""
    cap = " (more than --max-wait)" if wait else ""
    return f"GitHub's rate limit is exhausted{when}{cap}; run again after it resets"


def error(e: BaseException, doing: str, token: str = "", timeout: float | None = None) -> MaxcodeError:
    """One line for a failed API call: what was being done, the status, GitHub's message.
    Rate limits, server errors and silence come back as :class:`GitHubUnavailable`."""
    github = pygithub()

    transport = _transport(e, timeout if timeout is not None else timeout_from_env())
    if isinstance(e, github.RateLimitExceededException):
        return GitHubUnavailable(scrub(f"{doing}: {_limit_text(_reset_of(e), getattr(e, 'wait', None))}", token))
    if transport:
        return GitHubUnavailable(scrub(f"{doing}: {transport}", token))
    if isinstance(e, github.BadCredentialsException):
        why = "the token was rejected (401): check GITHUB_TOKEN"
    elif isinstance(e, github.UnknownObjectException):
        why = "not found (404): check --repo, and that the token can see the repository"
    elif isinstance(e, github.GithubException):
        data = e.data if isinstance(e.data, dict) else {}
        message = str(data.get("message") or e.data or "")
        details = "; ".join(str(x.get("message") or x.get("code") or x) for x in data.get("errors") or [] if isinstance(x, dict))
        why = f"GitHub answered {e.status}: {' '.join(message.split())[:300]}" + (f" ({details})" if details else "")
        if e.status == 403 and "not accessible" in message.lower():
            why += "; the workflow needs permissions: pull-requests: write (and contents: write to push)"
        if e.status >= 500:
            return GitHubUnavailable(scrub(f"{doing}: {why}; try again later", token))
    else:
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return MaxcodeError(scrub(f"{doing}: {why}", token))


#: GitHub refuses the body of a pull request, an issue or a comment longer than this (422)
BODY_CHARS = 65_536


def fit(body: str, note: str, limit: int = BODY_CHARS) -> str:
    """``body`` cut at a line so that it, a closing of what the cut left open (a code fence, a
    ``<details>``) and ``note`` fit GitHub's cap; unchanged when it fits. Without this, a
    large project's pull request or comment was refused after all the work that made it."""
    if len(body) <= limit:
        return body
    lines = body.split("\n")
    kept: list[str] = []
    size = 0
    room = limit - len(note) - 64  # the closings, the newlines around the note
    for line in lines:
        if size + len(line) + 1 > room:
            break
        kept.append(line)
        size += len(line) + 1
    fence = ""
    details = 0
    for line in kept:
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and stripped.strip("`") == "":
                fence = ""
        elif stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif stripped.startswith("<details>"):
            details += 1
        elif stripped.startswith("</details>"):
            details -= 1
    closing = ([fence] if fence else []) + ["</details>"] * max(details, 0)
    return "\n".join([*kept, *closing, "", note]) + "\n"
