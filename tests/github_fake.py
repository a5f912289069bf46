"""A fake of the GitHub REST API (the pull-request, issue, label and comment endpoints a PR bot
uses), served over real HTTP on 127.0.0.1 (pytest-httpserver), so the real PyGithub client runs
end to end against it.

Use it as a fixture (``fake_github``: one threaded server for the whole session, reset before
each test)::

    from github_fake import fake_github   # in a test module

    def test_x(fake_github):
        gh = fake_github.client()                       # github.Github: no retries, no throttling
        repo = gh.get_repo(fake_github.full_name)       # "acme/mylib"
        pr = repo.create_pull(title="t", body="b", head="feature", base="main")
        fake_github.close_pull(pr.number)               # what a human would do in the web UI
        fake_github.fail(500, times=2)                  # the next two requests get 500
        fake_github.fail(403)                           # primary rate limit (X-RateLimit-Remaining: 0)
        fake_github.fail(500, match="POST /repos/acme/mylib/issues")  # only matching requests
        fake_github.hang(30, times=2)                   # the next two requests get no answer for 30 s
        ... fake_github.requests   # every request received: method, path, query, json, headers, status
        ... fake_github.pulls      # number -> stored pull request (flat dict, see FakeGitHub.add_pull)
        ... fake_github.comments   # id -> stored issue comment (with "issue_number")

or as a context manager where a test needs its own server::

    with FakeGitHub(owner="acme", repo="mylib", token="t") as fake: ...

Faithful to GitHub where a bot can trip over it:

* ``GET /repos/{o}/{r}/pulls?head=...`` filters only on ``owner:branch``; a bare branch name is
  ignored, as GitHub does (all pull requests come back), see PyGithub/PyGithub#1566.
* list endpoints return the "simple" pull request (no ``merged``, ``mergeable``, ``comments``,
  ``commits``...): reading such an attribute on a listed PR makes PyGithub GET the pull request.
* creating a second open PR for the same head and base, an unknown head or base branch (when
  ``known_branches`` is a set), or head == base answer 422 "Validation Failed" with GitHub's
  ``errors`` list; pulls and issues share one number sequence; comment ids are a separate,
  larger sequence (so a bot that mixes them up gets 404).
* a wrong token answers 401 "Bad credentials" (PyGithub: ``BadCredentialsException``); no
  ``Authorization`` header answers 401 "Requires authentication" (plain ``GithubException``).
* every response carries ``X-RateLimit-*`` headers (PyGithub reads them into ``rate_limiting``).

Not modelled: reviews, merging through the API, commits/diffs, branches other than as names,
more than one repository.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import github
import pytest
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

FAKE_GH_TOKEN = "ghp_fakeTestToken0123456789abcdefABCDEF"
DOCS = "https://docs.github.com/rest"

_DEFAULT_MESSAGES = {
    400: "Problems parsing JSON",
    401: "Bad credentials",
    403: "API rate limit exceeded for user ID 1.",
    404: "Not Found",
    409: "Conflict",
    410: "Gone",
    422: "Validation Failed",
    429: "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
}

# fields GitHub only sends in the full pull request (GET/POST/PATCH of one), not in list items
_FULL_ONLY = ("merged", "mergeable", "rebaseable", "mergeable_state", "merged_by", "comments", "review_comments",
              "maintainer_can_modify", "commits", "additions", "deletions", "changed_files")

_INVALID_JSON = object()


class ApiError(Exception):
    """Raised inside a route handler: answered as GitHub's JSON error shape."""

    def __init__(self, status: int, message: str | None = None, errors: list[dict[str, Any]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message or _DEFAULT_MESSAGES.get(status, "Error")
        self.errors = errors
        self.headers = headers or {}

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if self.errors is not None:
            out["errors"] = self.errors
        out["documentation_url"] = DOCS
        out["status"] = str(self.status)
        return out


def _validation(**error: Any) -> ApiError:
    return ApiError(422, "Validation Failed", [error])


#: what GitHub accepts in the body of an issue, a pull request or a comment
BODY_CHARS = 65_536


def _body_fits(resource: str, body: Any) -> None:
    """GitHub's answer to a longer body: 422, the body named, and the cap in the message."""
    if isinstance(body, str) and len(body) > BODY_CHARS:
        raise _validation(resource=resource, code="custom", field="body",
                          message=f"body is too long (maximum is {BODY_CHARS} characters)")


class _Failure:
    def __init__(self, status: int, times: int, message: str | None, headers: dict[str, str],
                 body: Any, match: str | None) -> None:
        self.status, self.times, self.message, self.headers, self.body = status, times, message, headers, body
        self.match = re.compile(match) if match is not None else None

    def applies(self, method: str, path: str) -> bool:
        return self.match is None or bool(self.match.search(f"{method} {path}"))


def _stable_id(text: str, base: int = 1_000_000) -> int:
    return base + int(hashlib.sha1(text.encode()).hexdigest()[:6], 16)


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class FakeGitHub:
    """One fake repository ``owner/repo`` behind a fake GitHub API on 127.0.0.1.

    ``token``: the only accepted credential (``Authorization: token T`` or ``Bearer T``); None
    accepts any. ``login``: the authenticated user (``GET /user``, author of what the client
    creates). ``known_branches``: None accepts any head/base branch; a set makes others 422
    (the default branch is always known).
    """

    def __init__(self, owner: str = "acme", repo: str = "mylib", token: str | None = FAKE_GH_TOKEN, *,
                 login: str = "maxcode-bot", default_branch: str = "main",
                 known_branches: set[str] | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self._config = {"owner": owner, "repo": repo, "token": token, "login": login, "default_branch": default_branch,
                        "known_branches": known_branches}
        self.server = HTTPServer(host=host, port=port, threaded=True)
        self._lock = threading.RLock()
        self._routes = self._make_routes()
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Self:
        self.server.expect_request(re.compile(r".*")).respond_with_handler(self._handle)
        self.server.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self.server.is_running():
            self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Back to the constructor's configuration with an empty repository (the fixture does this
        before each test)."""
        with self._lock:
            cfg = self._config
            self.owner: str = cfg["owner"]
            self.repo: str = cfg["repo"]
            self.token: str | None = cfg["token"]
            self.login: str = cfg["login"]
            self.default_branch: str = cfg["default_branch"]
            kb = cfg["known_branches"]
            self.known_branches: set[str] | None = set(kb) if kb is not None else None
            self.branch_shas: dict[str, str] = {}
            self.requests: list[dict[str, Any]] = []
            self.pulls: dict[int, dict[str, Any]] = {}
            self.issues: dict[int, dict[str, Any]] = {}  # plain issues (pull requests are in .pulls)
            self.comments: dict[int, dict[str, Any]] = {}
            self.errors: list[str] = []  # tracebacks of bugs in the fake itself (answered 500)
            self.clock: Callable[[], float] = time.time  # tests may replace it to move time
            self._numbers = itertools.count(1)
            self._comment_ids = itertools.count(1_000_001)
            self._pull_ids = itertools.count(5_000_001)
            self._issue_ids = itertools.count(7_000_001)
            self._failures: list[_Failure] = []
            if hasattr(self, "_release"):
                self._release.set()  # requests still hanging from the last test answer now
            self._release = threading.Event()
            self._hangs: list[_Failure] = []
            self._used = 0
            self.server.clear_log()

    # -- what tests use -------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        """The API root, PyGithub's ``base_url`` (no trailing slash, no ``/api/v3``)."""
        return f"http://{self.server.host}:{self.server.port}"

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"

    def client(self, token: str | None = None, *, retry: Any = None, timeout: int = 5,
               **kwargs: Any) -> github.Github:
        """A ``github.Github`` pointed at this server: no retries (``retry=None``), no client-side
        throttling (PyGithub otherwise sleeps 0.25 s between requests and 1 s between writes)."""
        kwargs.setdefault("seconds_between_requests", None)
        kwargs.setdefault("seconds_between_writes", None)
        return github.Github(auth=github.Auth.Token(token or self.token or FAKE_GH_TOKEN), base_url=self.url,
                             retry=retry, timeout=timeout, **kwargs)

    def env(self) -> dict[str, str]:
        """GitHub Actions-style environment for a subprocess that talks to this server."""
        return {"GITHUB_TOKEN": self.token or FAKE_GH_TOKEN, "GITHUB_API_URL": self.url,
                "GITHUB_REPOSITORY": self.full_name}

    def fail(self, status: int, times: int = 1, *, message: str | None = None, headers: dict[str, str] | None = None,
             body: Any = None, match: str | None = None, reset_in: float = 0,
             retry_after: float | None = None) -> FakeGitHub:
        """The next ``times`` authenticated requests (only those whose ``"METHOD /path"`` matches the
        regex ``match``, when given) get HTTP ``status`` with GitHub's error JSON, changing nothing.

        403 without ``message`` is a primary rate limit ("API rate limit exceeded ...",
        ``X-RateLimit-Remaining: 0``, ``X-RateLimit-Reset`` = now + ``reset_in``); 429 without
        ``message`` a secondary one (``Retry-After``: ``retry_after`` or 0). ``body`` replaces the
        JSON entirely (a dict, or a str sent as is)."""
        h: dict[str, str] = {}
        rate_limited = (status == 403 and (message is None or message.lower().startswith("api rate limit")))
        if rate_limited:
            h.update({"X-RateLimit-Remaining": "0", "X-RateLimit-Used": "5000",
                      "X-RateLimit-Reset": str(int(self.clock() + reset_in))})
        if status == 429 or retry_after is not None:
            h["Retry-After"] = str(int(retry_after or 0))
        h.update(headers or {})
        with self._lock:
            self._failures.append(_Failure(status, times, message, h, body, match))
        return self

    def hang(self, seconds: float, times: int = 1, *, match: str | None = None) -> FakeGitHub:
        """The next ``times`` requests (those whose ``"METHOD /path"`` matches ``match``, when given)
        get no answer for ``seconds`` (a hung API; ``reset`` ends the wait early), then are
        answered as usual."""
        with self._lock:
            self._hangs.append(_Failure(0, times, None, {}, None, match))
            self._hang_seconds = seconds
        return self

    def _maybe_hang(self, request: Request) -> bool:
        """Hang a request that a ``hang`` rule matches; False when ``reset`` ended the wait (the
        request belongs to a finished test: it must not touch the next one's state)."""
        with self._lock:
            path = request.path.rstrip("/") or "/"
            rule = next((h for h in self._hangs if h.applies(request.method, path)), None)
            if rule is None:
                return True
            rule.times -= 1
            if rule.times <= 0:
                self._hangs.remove(rule)
            release, seconds = self._release, self._hang_seconds
        return not release.wait(seconds)

    def push_branch(self, name: str, sha: str | None = None) -> str:
        """A branch now exists (added to ``known_branches`` when that is a set) with head ``sha``;
        open pull requests from it show the new sha. Returns the sha."""
        with self._lock:
            sha = sha or _sha(f"{name}:{len(self.requests)}:{self.clock()}")
            self.branch_shas[name] = sha
            if self.known_branches is not None:
                self.known_branches.add(name)
            return sha

    def add_pull(self, head: str, *, title: str = "A pull request", body: str | None = "", base: str | None = None,
                 user: str = "octocat", draft: bool = False, state: str = "open",
                 labels: tuple[str, ...] | list[str] = ()) -> int:
        """A pull request opened by someone (no validation, no request recorded); returns its number.
        ``head`` is ``"branch"`` (this repository) or ``"owner:branch"`` (a fork).

        Stored keys: number, id, issue_id, title, body, state ("open"/"closed"), draft, merged,
        merged_at, closed_at, head (branch), head_owner, base (branch), user (login), labels
        (names), maintainer_can_modify, created_at, updated_at (ISO 8601 "Z" strings)."""
        with self._lock:
            return self._new_pull(head, base or self.default_branch, title, body, user, draft, state, list(labels))

    def add_issue(self, title: str, *, body: str | None = "", user: str = "octocat",
                  labels: tuple[str, ...] | list[str] = ()) -> int:
        """A plain issue opened by someone; returns its number (shared with pull requests)."""
        with self._lock:
            now = self._now()
            n = next(self._numbers)
            self.issues[n] = {"number": n, "id": next(self._issue_ids), "title": title, "body": body,
                              "state": "open", "state_reason": None, "user": user, "labels": list(labels),
                              "created_at": now, "updated_at": now, "closed_at": None}
            return n

    def add_comment(self, number: int, body: str, *, user: str = "octocat") -> int:
        """A comment someone left on issue/pull request ``number``; returns the comment id."""
        with self._lock:
            if self._item(number) is None:
                raise KeyError(number)
            return self._new_comment(number, body, user)["id"]

    def close_pull(self, number: int, *, merged: bool = False) -> None:
        """Close (or merge) pull request ``number`` as a human would in the web UI."""
        with self._lock:
            pr = self.pulls[number]
            now = self._now()
            pr.update(state="closed", closed_at=now, updated_at=now)
            if merged:
                pr.update(merged=True, merged_at=now)

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        """The stored comments on issue/pull request ``number``, oldest first."""
        with self._lock:
            return [c for c in sorted(self.comments.values(), key=lambda c: c["id"]) if c["issue_number"] == number]

    def requests_to(self, method: str | None = None, path_regex: str | None = None) -> list[dict[str, Any]]:
        """The recorded requests with this method (any if None) whose path matches ``path_regex``."""
        with self._lock:
            return [r for r in self.requests if (method is None or r["method"] == method.upper())
                    and (path_regex is None or re.search(path_regex, r["path"]))]

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1]

    # -- the server side ------------------------------------------------------------------

    def _handle(self, request: Request) -> Response:
        if not self._maybe_hang(request):
            return Response(b"", status=503)
        raw = request.get_data(as_text=True)
        try:
            body: Any = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError:
            body = _INVALID_JSON
        with self._lock:
            record: dict[str, Any] = {
                "method": request.method,
                "path": request.path,
                "query": request.args.to_dict(flat=True),
                "json": body if body is not _INVALID_JSON else raw,
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "status": None,
            }
            self.requests.append(record)
            extra: dict[str, str] = {}
            try:
                status, payload, extra = self._dispatch(request, body)
            except ApiError as e:
                status, payload, extra = e.status, e.payload(), e.headers
            except Exception as e:  # noqa: BLE001  (a bug in the fake: answer 500 and keep the traceback)
                self.errors.append(traceback.format_exc())
                status, payload = 500, {"message": f"fake github internal error: {e!r}"}
            record["status"] = status
            headers = self._rate_headers()
            headers.update(extra)
        if payload is None:
            return Response(b"", status=status, headers=headers)
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return Response(text, status=status, content_type="application/json; charset=utf-8", headers=headers)

    def _rate_headers(self) -> dict[str, str]:
        self._used += 1
        return {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": str(max(0, 5000 - self._used)),
                "X-RateLimit-Reset": str(int(self.clock()) + 3600), "X-RateLimit-Used": str(self._used),
                "X-RateLimit-Resource": "core", "X-GitHub-Media-Type": "github.v3; format=json",
                "X-GitHub-Request-Id": f"FAKE:{len(self.requests):08X}", "X-OAuth-Scopes": "repo"}

    def _dispatch(self, request: Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        header = request.headers.get("Authorization", "")
        if not header:
            raise ApiError(401, "Requires authentication")
        scheme, _, cred = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not cred.strip() or (
                self.token is not None and cred.strip() != self.token):
            raise ApiError(401, "Bad credentials")
        method, path = request.method, request.path.rstrip("/") or "/"
        for f in self._failures:
            if f.applies(method, path):
                f.times -= 1
                if f.times <= 0:
                    self._failures.remove(f)
                if f.body is not None:
                    return f.status, f.body, dict(f.headers)
                raise ApiError(f.status, f.message, headers=dict(f.headers))
        if body is _INVALID_JSON:
            raise ApiError(400, "Problems parsing JSON")
        for route_method, pattern, func in self._routes:
            m = pattern.fullmatch(path)
            if m and route_method == method:
                out = func(request, body, *m.groups())
                return out if len(out) == 3 else (*out, {})
        raise ApiError(404, "Not Found")

    def _make_routes(self) -> list[tuple[str, re.Pattern[str], Callable[..., tuple]]]:
        repo = r"/repos/([^/]+)/([^/]+)"
        table = [
            ("GET", r"/user", self._get_user),
            ("GET", r"/users/([^/]+)", self._get_named_user),
            ("GET", r"/rate_limit", self._get_rate_limit),
            ("GET", r"/repositories/(\d+)", self._get_repo_by_id),
            ("GET", repo, self._get_repo),
            ("GET", repo + r"/pulls", self._list_pulls),
            ("POST", repo + r"/pulls", self._create_pull),
            ("GET", repo + r"/pulls/(\d+)", self._get_pull),
            ("PATCH", repo + r"/pulls/(\d+)", self._edit_pull),
            ("GET", repo + r"/issues/comments/(\d+)", self._get_comment),
            ("PATCH", repo + r"/issues/comments/(\d+)", self._edit_comment),
            ("DELETE", repo + r"/issues/comments/(\d+)", self._delete_comment),
            ("GET", repo + r"/issues/(\d+)", self._get_issue),
            ("PATCH", repo + r"/issues/(\d+)", self._edit_issue),
            ("GET", repo + r"/issues/(\d+)/labels", self._get_labels),
            ("POST", repo + r"/issues/(\d+)/labels", self._add_labels),
            ("PUT", repo + r"/issues/(\d+)/labels", self._set_labels),
            ("DELETE", repo + r"/issues/(\d+)/labels", self._clear_labels),
            ("DELETE", repo + r"/issues/(\d+)/labels/([^/]+)", self._remove_label),
            ("GET", repo + r"/issues/(\d+)/comments", self._list_comments),
            ("POST", repo + r"/issues/(\d+)/comments", self._create_comment),
        ]
        return [(m, re.compile(p), f) for m, p, f in table]

    # -- helpers ------------------------------------------------------------------------

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))

    def _check_repo(self, owner: str, repo: str) -> None:
        if f"{owner}/{repo}".lower() != self.full_name.lower():  # GitHub matches names case-insensitively
            raise ApiError(404, "Not Found")

    def _item(self, number: int) -> dict[str, Any] | None:
        return self.pulls.get(number) or self.issues.get(number)

    def _item_or_404(self, owner: str, repo: str, number: str) -> dict[str, Any]:
        self._check_repo(owner, repo)
        item = self._item(int(number))
        if item is None:
            raise ApiError(404, "Not Found")
        return item

    def _branch_known(self, name: str) -> bool:
        return self.known_branches is None or name == self.default_branch or name in self.known_branches

    def _head_sha(self, owner: str, branch: str) -> str:
        if owner == self.owner and branch in self.branch_shas:
            return self.branch_shas[branch]
        return _sha(f"{owner}:{branch}")

    def _new_pull(self, head: str, base: str, title: str, body: str | None, user: str, draft: bool,
                  state: str = "open", labels: list[str] | None = None) -> int:
        head_owner, _, head_ref = head.rpartition(":")
        now = self._now()
        n = next(self._numbers)
        closed = state != "open"
        self.pulls[n] = {"number": n, "id": next(self._pull_ids), "issue_id": next(self._issue_ids),
                         "title": title, "body": body, "state": "closed" if closed else "open", "draft": draft,
                         "merged": False, "merged_at": None, "closed_at": now if closed else None,
                         "head": head_ref, "head_owner": head_owner or self.owner, "base": base, "user": user,
                         "labels": list(labels or []), "maintainer_can_modify": False, "locked": False,
                         "created_at": now, "updated_at": now}
        return n

    def _new_comment(self, number: int, body: str, user: str) -> dict[str, Any]:
        now = self._now()
        cid = next(self._comment_ids)
        self.comments[cid] = {"id": cid, "issue_number": number, "body": body, "user": user,
                              "created_at": now, "updated_at": now}
        item = self._item(number)
        if item is not None:
            item["updated_at"] = now
        return self.comments[cid]

    def _paginate(self, request: Request, items: list[Any]) -> tuple[int, Any, dict[str, str]]:
        args = request.args.to_dict(flat=True)
        try:
            per_page = min(100, max(1, int(args.get("per_page", 30))))
        except ValueError:
            per_page = 30
        try:
            page = max(1, int(args.get("page", 1)))
        except ValueError:
            page = 1
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []

        def link(p: int, rel: str) -> None:
            q = dict(args, page=str(p))
            if "per_page" in args:
                q["per_page"] = str(per_page)
            links.append(f'<{self.url}{request.path}?{urllib.parse.urlencode(q)}>; rel="{rel}"')

        if page > 1:
            link(page - 1, "prev")
        if page < last:
            link(page + 1, "next")
            link(last, "last")
        if page > 1:
            link(1, "first")
        return 200, chunk, ({"Link": ", ".join(links)} if links else {})

    # -- JSON the way GitHub shapes it ----------------------------------------------------

    def _api(self, path: str) -> str:
        return f"{self.url}{path}"

    def _web(self, path: str) -> str:
        return f"{self.url}{path}"

    def _user_json(self, login: str, kind: str | None = None) -> dict[str, Any]:
        uid = _stable_id(login)
        return {"login": login, "id": uid, "node_id": f"U_fake{uid}",
                "avatar_url": self._web(f"/avatars/{login}"), "gravatar_id": "",
                "url": self._api(f"/users/{login}"), "html_url": self._web(f"/{login}"),
                "type": kind or ("Bot" if login.endswith("[bot]") else "User"), "site_admin": False}

    def _repo_json(self, owner: str | None = None) -> dict[str, Any]:
        owner = owner or self.owner
        full = f"{owner}/{self.repo}"
        rid = _stable_id(full, 100_000_000)
        api = self._api(f"/repos/{full}")
        return {
            "id": rid, "node_id": f"R_fake{rid}", "name": self.repo, "full_name": full, "private": False,
            "owner": self._user_json(owner, "Organization"), "html_url": self._web(f"/{full}"),
            "description": None, "fork": owner != self.owner, "url": api,
            "pulls_url": api + "/pulls{/number}", "issues_url": api + "/issues{/number}",
            "issue_comment_url": api + "/issues/comments{/number}", "labels_url": api + "/labels{/name}",
            "comments_url": api + "/comments{/number}", "git_url": f"git://127.0.0.1/{full}.git",
            "clone_url": self._web(f"/{full}.git"), "ssh_url": f"git@127.0.0.1:{full}.git",
            "default_branch": self.default_branch, "visibility": "public", "archived": False, "disabled": False,
            "has_issues": True, "open_issues_count": sum(1 for i in [*self.pulls.values(), *self.issues.values()]
                                                         if i["state"] == "open"),
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            "pushed_at": "2024-01-01T00:00:00Z",
            "permissions": {"admin": True, "maintain": True, "push": True, "triage": True, "pull": True},
        }

    def _label_json(self, name: str) -> dict[str, Any]:
        lid = _stable_id(f"label:{name.lower()}")
        return {"id": lid, "node_id": f"LA_fake{lid}", "name": name, "color": "ededed", "default": False,
                "description": None, "url": self._api(f"/repos/{self.full_name}/labels/{urllib.parse.quote(name)}")}

    def _pull_json(self, pr: dict[str, Any], full: bool = True) -> dict[str, Any]:
        n = pr["number"]
        api = self._api(f"/repos/{self.full_name}")
        web = self._web(f"/{self.full_name}/pull/{n}")
        head_sha = self._head_sha(pr["head_owner"], pr["head"])
        out: dict[str, Any] = {
            "url": f"{api}/pulls/{n}", "id": pr["id"], "node_id": f"PR_fake{pr['id']}", "html_url": web,
            "diff_url": web + ".diff", "patch_url": web + ".patch", "issue_url": f"{api}/issues/{n}",
            "commits_url": f"{api}/pulls/{n}/commits", "review_comments_url": f"{api}/pulls/{n}/comments",
            "review_comment_url": f"{api}/pulls/comments{{/number}}", "comments_url": f"{api}/issues/{n}/comments",
            "statuses_url": f"{api}/statuses/{head_sha}",
            "number": n, "state": pr["state"], "locked": pr["locked"], "title": pr["title"],
            "user": self._user_json(pr["user"]), "body": pr["body"],
            "labels": [self._label_json(x) for x in pr["labels"]], "milestone": None, "active_lock_reason": None,
            "created_at": pr["created_at"], "updated_at": pr["updated_at"], "closed_at": pr["closed_at"],
            "merged_at": pr["merged_at"], "merge_commit_sha": _sha(f"merge:{n}") if pr["merged"] else None,
            "assignee": None, "assignees": [], "requested_reviewers": [], "requested_teams": [],
            "head": {"label": f"{pr['head_owner']}:{pr['head']}", "ref": pr["head"], "sha": head_sha,
                     "user": self._user_json(pr["head_owner"]), "repo": self._repo_json(pr["head_owner"])},
            "base": {"label": f"{self.owner}:{pr['base']}", "ref": pr["base"],
                     "sha": self._head_sha(self.owner, pr["base"]),
                     "user": self._user_json(self.owner, "Organization"), "repo": self._repo_json()},
            "_links": {"self": {"href": f"{api}/pulls/{n}"}, "html": {"href": web},
                       "issue": {"href": f"{api}/issues/{n}"}, "comments": {"href": f"{api}/issues/{n}/comments"}},
            "author_association": "MEMBER" if pr["user"] == self.login else "CONTRIBUTOR",
            "auto_merge": None, "draft": pr["draft"],
        }
        if full:
            out.update({
                "merged": pr["merged"], "mergeable": None if pr["state"] == "closed" else True,
                "rebaseable": True, "mergeable_state": "clean" if pr["state"] == "open" else "unknown",
                "merged_by": self._user_json(self.owner) if pr["merged"] else None,
                "comments": sum(1 for c in self.comments.values() if c["issue_number"] == n),
                "review_comments": 0, "maintainer_can_modify": pr["maintainer_can_modify"],
                "commits": 1, "additions": 1, "deletions": 0, "changed_files": 1,
            })
        return out

    def _issue_json(self, item: dict[str, Any]) -> dict[str, Any]:
        n = item["number"]
        api = self._api(f"/repos/{self.full_name}")
        is_pull = n in self.pulls
        web = self._web(f"/{self.full_name}/{'pull' if is_pull else 'issues'}/{n}")
        out: dict[str, Any] = {
            "url": f"{api}/issues/{n}", "repository_url": api, "labels_url": f"{api}/issues/{n}/labels{{/name}}",
            "comments_url": f"{api}/issues/{n}/comments", "events_url": f"{api}/issues/{n}/events",
            "html_url": web, "id": item["issue_id"] if is_pull else item["id"],
            "node_id": f"I_fake{item['issue_id'] if is_pull else item['id']}", "number": n,
            "title": item["title"], "user": self._user_json(item["user"]),
            "labels": [self._label_json(x) for x in item["labels"]], "state": item["state"],
            "state_reason": item.get("state_reason"), "locked": item.get("locked", False), "assignee": None,
            "assignees": [], "milestone": None,
            "comments": sum(1 for c in self.comments.values() if c["issue_number"] == n),
            "created_at": item["created_at"], "updated_at": item["updated_at"], "closed_at": item["closed_at"],
            "author_association": "MEMBER" if item["user"] == self.login else "CONTRIBUTOR",
            "active_lock_reason": None, "body": item["body"],
        }
        if is_pull:
            out["draft"] = item["draft"]
            out["pull_request"] = {"url": f"{api}/pulls/{n}", "html_url": web, "diff_url": web + ".diff",
                                   "patch_url": web + ".patch", "merged_at": item["merged_at"]}
        return out

    def _comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        n = c["issue_number"]
        api = self._api(f"/repos/{self.full_name}")
        kind = "pull" if n in self.pulls else "issues"
        return {"url": f"{api}/issues/comments/{c['id']}", "id": c["id"], "node_id": f"IC_fake{c['id']}",
                "html_url": self._web(f"/{self.full_name}/{kind}/{n}#issuecomment-{c['id']}"),
                "issue_url": f"{api}/issues/{n}", "user": self._user_json(c["user"]),
                "created_at": c["created_at"], "updated_at": c["updated_at"],
                "author_association": "MEMBER" if c["user"] == self.login else "CONTRIBUTOR",
                "body": c["body"], "performed_via_github_app": None}

    # -- routes ---------------------------------------------------------------------------

    def _get_user(self, request: Request, body: Any) -> tuple:
        out = self._user_json(self.login)
        out.update({"name": self.login, "email": None, "created_at": "2024-01-01T00:00:00Z",
                    "updated_at": "2024-01-01T00:00:00Z"})
        return 200, out

    def _get_named_user(self, request: Request, body: Any, login: str) -> tuple:
        return 200, self._user_json(login)

    def _get_rate_limit(self, request: Request, body: Any) -> tuple:
        core = {"limit": 5000, "remaining": max(0, 5000 - self._used), "reset": int(self.clock()) + 3600,
                "used": self._used, "resource": "core"}
        return 200, {"resources": {"core": core}, "rate": core}

    def _get_repo_by_id(self, request: Request, body: Any, rid: str) -> tuple:
        repo = self._repo_json()
        if int(rid) != repo["id"]:
            raise ApiError(404, "Not Found")
        return 200, repo

    def _get_repo(self, request: Request, body: Any, owner: str, repo: str) -> tuple:
        self._check_repo(owner, repo)
        return 200, self._repo_json()

    def _list_pulls(self, request: Request, body: Any, owner: str, repo: str) -> tuple:
        self._check_repo(owner, repo)
        args = request.args
        state = args.get("state", "open")
        if state not in ("open", "closed", "all"):
            raise _validation(resource="PullRequest", field="state", code="invalid")
        pulls = [p for p in self.pulls.values() if state == "all" or p["state"] == state]
        head = args.get("head")
        if head and ":" in head:  # GitHub ignores a head filter without the "owner:" part
            h_owner, _, h_ref = head.partition(":")
            pulls = [p for p in pulls if p["head_owner"].lower() == h_owner.lower() and p["head"] == h_ref]
        if args.get("base"):
            pulls = [p for p in pulls if p["base"] == args["base"]]
        sort = args.get("sort", "created")
        key = {"updated": "updated_at", "created": "created_at"}.get(sort, "created_at")
        direction = args.get("direction", "desc" if sort == "created" else "asc")
        pulls.sort(key=lambda p: (p[key], p["number"]), reverse=direction == "desc")
        return self._paginate(request, [self._pull_json(p, full=False) for p in pulls])

    def _create_pull(self, request: Request, body: Any, owner: str, repo: str) -> tuple:
        self._check_repo(owner, repo)
        if not isinstance(body, dict):
            raise ApiError(400, "Problems parsing JSON")
        for field in ("head", "base"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise _validation(resource="PullRequest", code="missing_field", field=field)
        if body.get("issue") is None and not body.get("title"):
            raise _validation(resource="PullRequest", code="missing_field", field="title")
        head, base = body["head"], body["base"]
        head_owner, _, head_ref = head.rpartition(":")
        head_owner = head_owner or self.owner
        same_repo = head_owner.lower() == self.owner.lower()
        if same_repo and not self._branch_known(head_ref):
            raise _validation(resource="PullRequest", field="head", code="invalid")
        if not self._branch_known(base):
            raise _validation(resource="PullRequest", field="base", code="invalid")
        if same_repo and head_ref == base:
            raise _validation(resource="PullRequest", code="custom", message=f"No commits between {base} and {head_ref}")
        label = f"{head_owner}:{head_ref}"
        for p in self.pulls.values():
            if (p["state"] == "open" and p["head_owner"].lower() == head_owner.lower() and p["head"] == head_ref
                    and p["base"] == base):
                raise _validation(resource="PullRequest", code="custom",
                                  message=f"A pull request already exists for {label}.")
        _body_fits("PullRequest", body.get("body"))
        n = self._new_pull(f"{head_owner}:{head_ref}", base, body.get("title") or "", body.get("body"),
                           self.login, bool(body.get("draft", False)))
        if body.get("maintainer_can_modify"):
            self.pulls[n]["maintainer_can_modify"] = True
        return 201, self._pull_json(self.pulls[n]), {"Location": f"{self.url}/repos/{self.full_name}/pulls/{n}"}

    def _pull_or_404(self, owner: str, repo: str, number: str) -> dict[str, Any]:
        self._check_repo(owner, repo)
        pr = self.pulls.get(int(number))
        if pr is None:
            raise ApiError(404, "Not Found")
        return pr

    def _get_pull(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        return 200, self._pull_json(self._pull_or_404(owner, repo, number))

    def _apply_state(self, item: dict[str, Any], state: Any) -> None:
        if state not in ("open", "closed"):
            raise _validation(resource="Issue" if item["number"] in self.issues else "PullRequest",
                              field="state", code="invalid")
        if state == item["state"]:
            return
        if state == "open" and item["number"] in self.pulls:
            if item["merged"]:
                raise _validation(resource="PullRequest", code="custom",
                                  message="state cannot be changed. The pull request has been merged.")
            for p in self.pulls.values():
                if (p is not item and p["state"] == "open" and p["head_owner"] == item["head_owner"]
                        and p["head"] == item["head"] and p["base"] == item["base"]):
                    raise _validation(resource="PullRequest", code="custom",
                                      message=f"A pull request already exists for {p['head_owner']}:{p['head']}.")
        item["state"] = state
        item["closed_at"] = self._now() if state == "closed" else None

    def _edit_common(self, item: dict[str, Any], body: Any, extra: tuple[str, ...]) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "Problems parsing JSON")
        if "title" in body:
            if not isinstance(body["title"], str) or not body["title"]:
                raise _validation(resource="PullRequest", field="title", code="missing_field")
            item["title"] = body["title"]
        if "body" in body:
            _body_fits("PullRequest" if item["number"] in self.pulls else "Issue", body["body"])
            item["body"] = body["body"]
        if "state" in body:
            self._apply_state(item, body["state"])
        if "base" in body and "base" in extra:
            if not self._branch_known(body["base"]):
                raise _validation(resource="PullRequest", field="base", code="invalid")
            item["base"] = body["base"]
        if "maintainer_can_modify" in body and "maintainer_can_modify" in extra:
            item["maintainer_can_modify"] = bool(body["maintainer_can_modify"])
        if "labels" in body and "labels" in extra:
            item["labels"] = self._label_names(body["labels"], [])
        if "state_reason" in body and "state_reason" in extra:
            item["state_reason"] = body["state_reason"]
        item["updated_at"] = self._now()

    def _edit_pull(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        pr = self._pull_or_404(owner, repo, number)
        self._edit_common(pr, body, ("base", "maintainer_can_modify"))
        return 200, self._pull_json(pr)

    def _get_issue(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        return 200, self._issue_json(self._item_or_404(owner, repo, number))

    def _edit_issue(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        self._edit_common(item, body, ("labels", "state_reason"))
        return 200, self._issue_json(item)

    @staticmethod
    def _label_names(body: Any, current: list[str]) -> list[str]:
        raw = body.get("labels") if isinstance(body, dict) else body
        if not isinstance(raw, list):
            raise _validation(resource="Label", field="labels", code="invalid")
        names = list(current)
        for x in raw:
            name = x.get("name") if isinstance(x, dict) else x
            if not isinstance(name, str) or not name:
                raise _validation(resource="Label", field="name", code="missing_field")
            if name.lower() not in (n.lower() for n in names):
                names.append(name)
        return names

    def _labels_reply(self, item: dict[str, Any]) -> tuple:
        return 200, [self._label_json(x) for x in item["labels"]]

    def _get_labels(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        return self._paginate(request, [self._label_json(x) for x in item["labels"]])

    def _add_labels(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        item["labels"] = self._label_names(body, item["labels"])
        item["updated_at"] = self._now()
        return self._labels_reply(item)

    def _set_labels(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        item["labels"] = self._label_names(body, [])
        item["updated_at"] = self._now()
        return self._labels_reply(item)

    def _clear_labels(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        item["labels"] = []
        item["updated_at"] = self._now()
        return 204, None

    def _remove_label(self, request: Request, body: Any, owner: str, repo: str, number: str, name: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        name = urllib.parse.unquote(name)
        kept = [x for x in item["labels"] if x.lower() != name.lower()]
        if len(kept) == len(item["labels"]):
            raise ApiError(404, "Label does not exist")
        item["labels"] = kept
        item["updated_at"] = self._now()
        return self._labels_reply(item)

    def _list_comments(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        comments = self.comments_on(item["number"])
        since = request.args.get("since")
        if since:
            comments = [c for c in comments if c["updated_at"] >= since]
        return self._paginate(request, [self._comment_json(c) for c in comments])

    def _create_comment(self, request: Request, body: Any, owner: str, repo: str, number: str) -> tuple:
        item = self._item_or_404(owner, repo, number)
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
            raise _validation(resource="IssueComment", code="missing_field", field="body")
        _body_fits("IssueComment", body["body"])
        c = self._new_comment(item["number"], body["body"], self.login)
        url = f"{self.url}/repos/{self.full_name}/issues/comments/{c['id']}"
        return 201, self._comment_json(c), {"Location": url}

    def _comment_or_404(self, owner: str, repo: str, cid: str) -> dict[str, Any]:
        self._check_repo(owner, repo)
        c = self.comments.get(int(cid))
        if c is None:
            raise ApiError(404, "Not Found")
        return c

    def _get_comment(self, request: Request, body: Any, owner: str, repo: str, cid: str) -> tuple:
        return 200, self._comment_json(self._comment_or_404(owner, repo, cid))

    def _edit_comment(self, request: Request, body: Any, owner: str, repo: str, cid: str) -> tuple:
        c = self._comment_or_404(owner, repo, cid)
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) or not body["body"]:
            raise _validation(resource="IssueComment", code="missing_field", field="body")
        _body_fits("IssueComment", body["body"])
        c["body"] = body["body"]
        c["updated_at"] = self._now()
        return 200, self._comment_json(c)

    def _delete_comment(self, request: Request, body: Any, owner: str, repo: str, cid: str) -> tuple:
        c = self._comment_or_404(owner, repo, cid)
        del self.comments[c["id"]]
        return 204, None


_SERVER: FakeGitHub | None = None
_SERVER_LOCK = threading.Lock()


def shared_server() -> FakeGitHub:
    """The process-wide fake (default configuration), started on first use."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = FakeGitHub().start()
        return _SERVER


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """The shared fake, reset before the test; a bug in the fake itself fails the test."""
    srv = shared_server()
    srv.reset()
    yield srv
    errors = list(srv.errors)
    srv.reset()
    if errors:
        pytest.fail("fake GitHub server raised:\n" + "\n".join(errors))


def checkout_with_origin(work: Path, origin: Path, message: str) -> Any:
    """``work`` as a git checkout of its files, committed by a human on ``main`` and pushed to a
    bare repository at ``origin``: what ``maxcode pr`` runs in."""
    import git

    (work / ".gitignore").write_text(".maxcode/\n__pycache__/\n*.json\n")
    git.Repo.init(origin, bare=True, initial_branch="main")
    repo = git.Repo.init(work, initial_branch="main")
    repo.git.add("--all")
    human = git.Actor("A Human", "human@example.com")
    repo.index.commit(message, author=human, committer=human)
    repo.create_remote("origin", str(origin)).push("main:main")
    return repo
