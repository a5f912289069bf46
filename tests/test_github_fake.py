"""The fake GitHub API (tests/github_fake.py), driven through the real PyGithub client."""

from __future__ import annotations

from datetime import datetime, timezone

import github
import pytest
import requests
from github_fake import FAKE_GH_TOKEN, FakeGitHub, fake_github

__all__ = ["fake_github"]  # the fixture, imported for pytest


def _repo(fake: FakeGitHub, **kwargs) -> github.Repository.Repository:
    return fake.client(**kwargs).get_repo(fake.full_name)


def test_repo_and_authenticated_user(fake_github: FakeGitHub) -> None:
    gh = fake_github.client()
    repo = gh.get_repo("acme/mylib")
    assert repo.full_name == "acme/mylib"
    assert repo.name == "mylib"
    assert repo.owner.login == "acme"
    assert repo.default_branch == "main"
    assert repo.url == f"{fake_github.url}/repos/acme/mylib"
    assert repo.html_url.startswith(fake_github.url)
    assert gh.get_user().login == "maxcode-bot"
    assert [(r["method"], r["path"]) for r in fake_github.requests] == [("GET", "/repos/acme/mylib"), ("GET", "/user")]
    assert all(r["headers"]["authorization"] == f"token {FAKE_GH_TOKEN}" for r in fake_github.requests)
    assert gh.rate_limiting[1] == 5000 and gh.rate_limiting[0] < 5000


def test_repo_names_are_case_insensitive(fake_github: FakeGitHub) -> None:
    assert fake_github.client().get_repo("ACME/MyLib").full_name == "acme/mylib"


def test_create_pull_then_list_by_head_finds_it(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="Speed up matmul", body="Faster by 2x", head="maxcode/matmul", base="main",
                          draft=True)
    assert pr.number == 1  # the fixture reset the numbering
    assert (pr.state, pr.title, pr.body, pr.draft, pr.merged) == ("open", "Speed up matmul", "Faster by 2x", True,
                                                                  False)
    assert (pr.head.ref, pr.head.label, pr.head.repo.full_name) == ("maxcode/matmul", "acme:maxcode/matmul",
                                                                    "acme/mylib")
    assert (pr.base.ref, pr.base.label) == ("main", "acme:main")
    assert len(pr.head.sha) == 40
    assert pr.user.login == "maxcode-bot"
    assert pr.labels == []
    assert pr.html_url == f"{fake_github.url}/acme/mylib/pull/1"
    assert pr.url == f"{fake_github.url}/repos/acme/mylib/pulls/1"
    assert isinstance(pr.created_at, datetime) and pr.created_at.tzinfo == timezone.utc
    assert pr.updated_at >= pr.created_at
    post = fake_github.requests_to("POST", r"/pulls$")[0]
    assert post["json"] == {"base": "main", "head": "maxcode/matmul", "title": "Speed up matmul",
                            "body": "Faster by 2x", "draft": True}
    assert post["status"] == 201
    assert fake_github.pulls[1]["head"] == "maxcode/matmul"

    other = repo.create_pull(title="Other", body="", head="maxcode/conv", base="main")
    found = list(repo.get_pulls(state="open", head="acme:maxcode/matmul", base="main"))
    assert [p.number for p in found] == [pr.number]
    assert found[0].title == "Speed up matmul" and found[0].head.ref == "maxcode/matmul"
    assert list(repo.get_pulls(head="acme:nope")) == []
    assert list(repo.get_pulls(head="acme:maxcode/matmul", base="develop")) == []
    assert fake_github.requests_to("GET", r"/pulls$")[0]["query"] == {"state": "open", "head": "acme:maxcode/matmul",
                                                                      "base": "main"}
    # GitHub ignores a head filter without "owner:": everything comes back, newest first
    assert [p.number for p in repo.get_pulls(head="maxcode/matmul")] == [other.number, pr.number]


def test_get_pull_by_number(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    n = repo.create_pull(title="T", body="B", head="feature", base="main").number
    pr = repo.get_pull(n)
    assert (pr.number, pr.title, pr.body, pr.state, pr.merged, pr.draft) == (n, "T", "B", "open", False, False)
    with pytest.raises(github.UnknownObjectException) as exc:
        repo.get_pull(999)
    assert exc.value.status == 404


def test_second_create_for_same_head_is_422(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    first = repo.create_pull(title="A", body="", head="feature", base="main")
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(title="B", body="", head="feature", base="main")
    assert exc.value.status == 422
    assert exc.value.data["message"] == "Validation Failed"
    assert exc.value.data["errors"][0]["message"] == "A pull request already exists for acme:feature."
    assert list(fake_github.pulls) == [first.number]
    # the same head into another base is allowed, and so is a new PR once the old one is closed
    assert repo.create_pull(title="C", body="", head="feature", base="release").number == 2
    fake_github.close_pull(first.number)
    assert repo.create_pull(title="D", body="", head="feature", base="main").number == 3


def test_unknown_branch_is_422_when_branches_are_tracked(fake_github: FakeGitHub) -> None:
    fake_github.known_branches = {"exists"}
    repo = _repo(fake_github)
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(title="T", body="", head="missing", base="main")
    assert exc.value.status == 422
    assert exc.value.data["errors"] == [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(title="T", body="", head="exists", base="nobase")
    assert exc.value.data["errors"][0]["field"] == "base"
    sha = fake_github.push_branch("missing")
    pr = repo.create_pull(title="T", body="", head="missing", base="main")
    assert pr.head.sha == sha
    assert fake_github.pulls == {pr.number: fake_github.pulls[pr.number]} and len(fake_github.pulls) == 1


def test_create_pull_validation(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(title="T", body="", head="main", base="main")
    assert exc.value.status == 422 and "No commits between main and main" in exc.value.data["errors"][0]["message"]
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(body="", head="feature", base="main")
    assert exc.value.data["errors"][0] == {"resource": "PullRequest", "code": "missing_field", "field": "title"}
    assert fake_github.pulls == {}


def test_edit_updates_title_and_body(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="Old", body="old body", head="feature", base="main")
    pr.edit(title="New title", body="new body")
    assert (pr.title, pr.body) == ("New title", "new body")
    assert fake_github.last["method"] == "PATCH" and fake_github.last["path"] == "/repos/acme/mylib/pulls/1"
    assert fake_github.last["json"] == {"title": "New title", "body": "new body"}
    again = repo.get_pull(pr.number)
    assert (again.title, again.body, again.state) == ("New title", "new body", "open")
    assert fake_github.pulls[pr.number]["title"] == "New title"


def test_edit_state_closes_and_reopens(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="T", body="", head="feature", base="main")
    pr.edit(state="closed")
    assert pr.state == "closed" and pr.closed_at is not None
    pr.edit(state="open")
    assert pr.state == "open" and pr.closed_at is None
    fake_github.close_pull(pr.number, merged=True)
    with pytest.raises(github.GithubException) as exc:
        pr.edit(state="open")
    assert exc.value.status == 422
    assert repo.get_pull(pr.number).merged is True


def test_labels_on_pull_and_issue(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="T", body="", head="feature", base="main")
    pr.add_to_labels("maxcode", "performance")
    assert fake_github.last["path"] == f"/repos/acme/mylib/issues/{pr.number}/labels"
    assert fake_github.last["json"] == ["maxcode", "performance"]
    repo.get_issue(pr.number).add_to_labels("performance", "needs-review")  # no duplicates
    assert fake_github.pulls[pr.number]["labels"] == ["maxcode", "performance", "needs-review"]
    assert [label.name for label in repo.get_pull(pr.number).labels] == ["maxcode", "performance", "needs-review"]
    assert [label.name for label in pr.get_labels()] == ["maxcode", "performance", "needs-review"]
    pr.remove_from_labels("needs-review")
    assert fake_github.pulls[pr.number]["labels"] == ["maxcode", "performance"]
    listed = list(repo.get_pulls(head="acme:feature"))[0]
    assert [label.name for label in listed.labels] == ["maxcode", "performance"]


def test_comments_create_list_edit(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="T", body="", head="feature", base="main")
    human = fake_github.add_comment(pr.number, "looks slow to me", user="alice")
    c1 = pr.create_issue_comment("Benchmark: 1.8x faster")
    issue = repo.get_issue(pr.number)
    assert issue.number == pr.number and issue.pull_request is not None
    c2 = issue.create_comment("second")
    assert c1.id != pr.number and c1.id > 1_000_000  # comment ids are not issue numbers
    assert c1.user.login == "maxcode-bot" and c1.body == "Benchmark: 1.8x faster"
    assert c1.html_url == f"{fake_github.url}/acme/mylib/pull/{pr.number}#issuecomment-{c1.id}"
    assert c1.url == f"{fake_github.url}/repos/acme/mylib/issues/comments/{c1.id}"
    assert isinstance(c1.created_at, datetime) and isinstance(c1.updated_at, datetime)

    listed = list(issue.get_comments())
    assert [(c.id, c.user.login, c.body) for c in listed] == [
        (human, "alice", "looks slow to me"), (c1.id, "maxcode-bot", "Benchmark: 1.8x faster"),
        (c2.id, "maxcode-bot", "second")]
    assert [c.id for c in pr.get_issue_comments()] == [human, c1.id, c2.id]

    c1.edit("Benchmark: 2.0x faster")
    assert c1.body == "Benchmark: 2.0x faster"
    assert fake_github.last["method"] == "PATCH"
    assert fake_github.last["path"] == f"/repos/acme/mylib/issues/comments/{c1.id}"
    assert fake_github.comments[c1.id] == {**fake_github.comments[c1.id], "issue_number": pr.number,
                                           "body": "Benchmark: 2.0x faster", "user": "maxcode-bot"}
    assert [c.body for c in pr.get_issue_comments()][1] == "Benchmark: 2.0x faster"
    assert repo.get_pull(pr.number).comments == 3


def test_comments_on_plain_issue(fake_github: FakeGitHub) -> None:
    n = fake_github.add_issue("Tracking: kernels to speed up")
    repo = _repo(fake_github)
    issue = repo.get_issue(n)
    assert issue.title == "Tracking: kernels to speed up" and issue.pull_request is None
    issue.create_comment("on it")
    assert [c.body for c in issue.get_comments()] == ["on it"]
    with pytest.raises(github.UnknownObjectException):
        repo.get_pull(n)  # an issue is not a pull request


def test_closed_pull_shows_in_closed_not_open(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    keep = repo.create_pull(title="Keep", body="", head="keep", base="main")
    gone = repo.create_pull(title="Gone", body="", head="gone", base="main")
    fake_github.close_pull(gone.number)
    assert [p.number for p in repo.get_pulls(state="open")] == [keep.number]
    assert [p.number for p in repo.get_pulls()] == [keep.number]  # open is the default
    assert [p.number for p in repo.get_pulls(state="closed")] == [gone.number]
    assert [p.number for p in repo.get_pulls(state="all")] == [gone.number, keep.number]
    assert list(repo.get_pulls(state="open", head="acme:gone")) == []
    assert [p.state for p in repo.get_pulls(state="closed", head="acme:gone")] == ["closed"]


def test_listed_pull_is_simple_and_completes_lazily(fake_github: FakeGitHub) -> None:
    n = fake_github.add_pull("feature", title="By a human")
    fake_github.close_pull(n, merged=True)
    repo = _repo(fake_github)
    listed = list(repo.get_pulls(state="closed"))[0]
    assert listed.user.login == "octocat" and listed.merged_at is not None
    assert not fake_github.requests_to("GET", rf"/pulls/{n}$")
    assert listed.merged is True  # not in list items: PyGithub GETs the pull request, as on GitHub
    assert len(fake_github.requests_to("GET", rf"/pulls/{n}$")) == 1


def test_pagination(fake_github: FakeGitHub) -> None:
    numbers = [fake_github.add_pull(f"b{i}", title=f"PR {i}") for i in range(5)]
    repo = _repo(fake_github, per_page=2)
    assert [p.number for p in repo.get_pulls(state="all", direction="asc")] == numbers
    pages = [r["query"].get("page") for r in fake_github.requests_to("GET", r"/pulls$")]
    assert pages == [None, "2", "3"]  # the first page is requested without page=, the rest follow Link
    assert repo.get_pulls(state="all").totalCount == 5


def test_bad_token_is_bad_credentials(fake_github: FakeGitHub) -> None:
    with pytest.raises(github.BadCredentialsException) as exc:
        fake_github.client(token="ghp_wrong").get_repo(fake_github.full_name)
    assert exc.value.status == 401
    assert exc.value.data["message"] == "Bad credentials" and "documentation_url" in exc.value.data
    assert fake_github.last["status"] == 401


def test_bearer_token_accepted_and_missing_auth_rejected(fake_github: FakeGitHub) -> None:
    url = f"{fake_github.url}/repos/acme/mylib"
    ok = requests.get(url, headers={"Authorization": f"Bearer {FAKE_GH_TOKEN}"}, timeout=5)
    assert ok.status_code == 200 and ok.json()["full_name"] == "acme/mylib"
    assert ok.headers["X-RateLimit-Limit"] == "5000"
    missing = requests.get(url, timeout=5)
    assert missing.status_code == 401 and missing.json()["message"] == "Requires authentication"


def test_unknown_repo_is_unknown_object(fake_github: FakeGitHub) -> None:
    with pytest.raises(github.UnknownObjectException) as exc:
        fake_github.client().get_repo("acme/other")
    assert exc.value.status == 404 and exc.value.data["message"] == "Not Found"


def test_injected_500_surfaces_and_changes_nothing(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    fake_github.fail(500)
    with pytest.raises(github.GithubException) as exc:
        repo.create_pull(title="T", body="", head="feature", base="main")
    assert exc.value.status == 500
    assert fake_github.pulls == {}
    assert repo.create_pull(title="T", body="", head="feature", base="main").number == 1  # only once


def test_injected_failure_can_target_one_endpoint(fake_github: FakeGitHub) -> None:
    repo = _repo(fake_github)
    pr = repo.create_pull(title="T", body="", head="feature", base="main")
    fake_github.fail(502, match=r"^POST .*/comments$", message="Bad Gateway")
    assert repo.get_pull(pr.number).title == "T"  # not matched: unaffected
    with pytest.raises(github.GithubException) as exc:
        pr.create_issue_comment("hi")
    assert exc.value.status == 502 and exc.value.data["message"] == "Bad Gateway"
    assert pr.create_issue_comment("hi").body == "hi"
    assert len(fake_github.comments) == 1


def test_injected_rate_limit(fake_github: FakeGitHub) -> None:
    fake_github.fail(403)
    with pytest.raises(github.RateLimitExceededException) as exc:
        fake_github.client().get_repo(fake_github.full_name)
    assert exc.value.status == 403
    assert exc.value.headers["x-ratelimit-remaining"] == "0"


def test_retrying_client_recovers_from_transient_500(fake_github: FakeGitHub) -> None:
    fake_github.fail(500, times=2)
    repo = _repo(fake_github, retry=github.GithubRetry(total=3))
    assert repo.full_name == "acme/mylib"
    assert [r["status"] for r in fake_github.requests] == [500, 500, 200]


def test_own_server_as_context_manager() -> None:
    with FakeGitHub(owner="org", repo="proj", token="tok", login="bot[bot]", known_branches=set()) as fake:
        gh = fake.client()
        repo = gh.get_repo("org/proj")
        assert repo.full_name == "org/proj"
        assert gh.get_user().login == "bot[bot]"
        fake.push_branch("feature")
        pr = repo.create_pull(title="T", body="", head="feature", base="main")
        assert pr.user.type == "Bot" and pr.head.label == "org:feature"
        assert fake.requests[0]["headers"]["authorization"] == "token tok"
        assert fake.env()["GITHUB_REPOSITORY"] == "org/proj"
        assert not fake.errors
    assert not fake.server.is_running()
