"""``maxcode pr``: one pull request per verified target, on the bot's own branch.

For each target a report calls ``verified`` (faster with a strong check, the user's tests
passed with the kernel), not for weak-check or unverified ones, nor for range-limited ones
unless the target accepts them (``accept_range_limited``): the kernel is applied to a
fresh worktree of the base branch (the user's checkout is never touched), committed as the
bot, force-pushed to ``maxcode/optimize-<target>`` (the only branches it writes), and the
pull request for that branch is opened, or updated when one is open. A pull request a human
closed without merging is respected: the same kernel (by hash) is not proposed again.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._extras import require
from ..apply import apply_target, is_program, range_held, written_paths
from ..errors import MaxcodeError
from ..targets.accept import EXTENSIONS
from ..targets.lock import KERNELS_DIR
from . import pr_body
from .github import client, error, pygithub, scrub

BRANCH_PREFIX = "maxcode/optimize-"
DEFAULT_AUTHOR = "maxcode-bot <maxcode-bot@users.noreply.github.com>"


@dataclass
class Outcome:
    target: str
    action: str  # "opened" | "updated" | "skipped" | "would open" | "would update" | "failed"
    detail: str
    url: str | None = None

    def line(self) -> str:
        if "\n" in self.detail:  # a dry run's title and body
            return f"{self.target}: {self.action}: {self.detail}"
        return f"{self.target}: {self.action}" + (f" {self.url}" if self.url else "") + (f" ({self.detail})" if self.detail else "")


def _gitpython() -> Any:
    return require("git", "maxcode pr")


def branch_for(target_id: str) -> str:
    return BRANCH_PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "-", target_id).strip("-.")


def parse_author(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>\s*", text or "")
    if not m:
        raise MaxcodeError(f"--author {text!r}: write it as 'Name <email>'")
    return m.group("name"), m.group("email")


def why_not(t: dict[str, Any]) -> str | None:
    """Why a target gets no pull request (None: it gets one)."""
    if t.get("status") != "verified" or not t.get("verified"):
        return f"not verified ({t.get('status')}: {t.get('reason', '')})"
    if t.get("weak_check"):
        return "the correctness check was weak (outputs that barely depend on the inputs); no pull request for that"
    if not t.get("best"):
        return "the report has no kernel for it"
    return range_held(t)


def _kernel(t: dict[str, Any], root: Path) -> tuple[str, str]:
    path = root / t["best"]["source_path"]
    try:
        source = path.read_text()
    except OSError:
        raise MaxcodeError(f"{t['id']}: the report's kernel {path} is gone; run pytest --maxcode again") from None
    return source, hashlib.sha256(source.encode()).hexdigest()[:16]


class Bot:
    def __init__(self, root: Path, report: dict[str, Any], *, repo_name: str, base: str | None, remote: str = "origin",
                 author: str = DEFAULT_AUTHOR, draft: bool = False, labels: tuple[str, ...] = (), dry_run: bool = False,
                 api_url: str | None = None) -> None:
        """Many parameters because they are ``maxcode pr``'s options, keyword-only, as the command passes them."""
        self.root = root
        self.report = report
        self.repo_name = repo_name
        self.base = base
        self.remote = remote
        self.author = parse_author(author)
        self.draft = draft
        self.labels = labels
        self.dry_run = dry_run
        self.api_url = api_url
        self.gh: Any = None
        self.token = ""

    # -- git --------------------------------------------------------------------------------

    def _git(self) -> Any:
        git = _gitpython()

        try:
            return git.Repo(self.root, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise MaxcodeError(f"{self.root} is not in a git repository; run maxcode pr in the project's checkout") from None

    def push_branch(self, t: dict[str, Any], branch: str, message: str) -> bool:
        """Commit the applied kernel on top of the base in a throwaway worktree and force-push it
        to the bot's branch; False when applying it changes nothing (already on the base)."""
        git = _gitpython()

        repo = self._git()
        base = self.base
        try:
            repo.git.fetch(self.remote, f"+refs/heads/{base}:refs/remotes/{self.remote}/{base}")
        except git.GitCommandError as e:
            raise MaxcodeError(f"git fetch {self.remote} {base}: {_git_error(e, self.token)}") from None
        sub = self.root.resolve().relative_to(Path(repo.working_tree_dir).resolve())
        with tempfile.TemporaryDirectory(prefix="maxcode-pr-") as tmp:
            repo.git.worktree("add", "--detach", tmp, f"{self.remote}/{base}")
            try:
                wt = git.Repo(tmp)
                apply_target(t, Path(tmp) / sub, source_root=self.root)
                wt.git.add("--all", "--", *(str(sub / path) for path in written_paths(t)))
                if not wt.index.diff("HEAD"):
                    return False
                actor = git.Actor(*self.author)
                wt.index.commit(message, author=actor, committer=actor)
                try:
                    wt.git.push(self.remote, f"+HEAD:refs/heads/{branch}")
                except git.GitCommandError as e:
                    raise MaxcodeError(f"git push {self.remote} {branch}: {_git_error(e, self.token)}") from None
                return True
            finally:
                repo.git.worktree("remove", "--force", tmp)

    # -- GitHub -----------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self.gh is None:
            self.gh, self.token = client(self.api_url)
        github = pygithub()

        try:
            repo = self.gh.get_repo(self.repo_name)
        except (github.GithubException, OSError) as e:
            raise error(e, f"opening {self.repo_name}", self.token) from None
        if self.base is None:
            self.base = repo.default_branch
        return repo

    def run(self) -> list[Outcome]:
        _gitpython()  # the bot's extra is checked before any target, so a CI job learns it on its first run
        if not self.dry_run:
            pygithub()
        targets = self.report.get("targets") or []
        todo = [(t, why_not(t)) for t in targets]
        outcomes = [Outcome(t.get("id", "?"), "skipped", why) for t, why in todo if why]
        ready = [t for t, why in todo if not why]
        if not ready:
            return outcomes
        repo = None if self.dry_run else self._connect()
        if self.base is None:
            self.base = "main"
        owner = self.repo_name.split("/")[0]
        for t in ready:
            try:
                outcomes.append(self._one(repo, owner, t))
            except MaxcodeError as e:
                outcomes.append(Outcome(t["id"], "failed", str(e)))
        return outcomes

    def _one(self, repo: Any, owner: str, t: dict[str, Any]) -> Outcome:
        github = pygithub()

        source, kernel_hash = _kernel(t, self.root)
        branch = branch_for(t["id"])
        kernel_path = written_paths(t)[0] if is_program(t) else f"{KERNELS_DIR}/{t['id']}{EXTENSIONS[t['best']['lang']]}"
        title = pr_body.title(t, self.report.get("machine") or {})
        text = pr_body.body(t, self.report, source=source, kernel_path=kernel_path, kernel_hash=kernel_hash, branch=branch)
        if self.dry_run:
            return Outcome(t["id"], "would open or update", f"branch {branch} onto {self.base}\n\n# {title}\n\n{text}")
        doing = f"the pull request for {branch}"
        try:
            head = f"{owner}:{branch}"
            for closed in repo.get_pulls(state="closed", head=head, base=self.base):
                found = pr_body.parse_marker(closed.body)
                if found and found[1] == kernel_hash and not closed.merged:
                    return Outcome(t["id"], "skipped", f"#{closed.number} with this kernel was closed without merging")
            open_prs = list(repo.get_pulls(state="open", head=head, base=self.base))
        except (github.GithubException, OSError) as e:
            raise error(e, f"looking up {doing}", self.token) from None
        message = f"{title}\n\nKernel {kernel_hash} for {t['id']}, verified by pytest-maxcode: {t.get('reason', '')}"
        same = bool(open_prs) and (pr_body.parse_marker(open_prs[0].body) or ("", ""))[1] == kernel_hash
        # the same kernel again: keep the commit (and the review comments anchored to it), refresh the numbers
        if not same and not self.push_branch(t, branch, message):
            return Outcome(t["id"], "skipped", f"this kernel is already on {self.base}")
        try:
            if open_prs:
                pr = open_prs[0]
                pr.edit(title=title, body=text)
                action = "updated"
            else:
                pr = repo.create_pull(title=title, body=text, head=branch, base=self.base, draft=self.draft)
                action = "opened"
            if self.labels:
                pr.add_to_labels(*self.labels)
        except (github.GithubException, OSError) as e:
            raise error(e, f"{'updating' if open_prs else 'opening'} {doing}", self.token) from None
        return Outcome(t["id"], action, f"{t['speedup']:.3g}x, kernel {kernel_hash}", pr.html_url)


def _git_error(e: Any, token: str) -> str:
    text = " ".join(str(getattr(e, "stderr", "") or e).split())
    return scrub(text, token)[:400]
