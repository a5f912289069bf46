"""``maxcode pr``: one pull request per verified target, on the bot's own branch.

For each target a report calls ``verified`` (faster with a strong check, the user's tests
passed with the kernel), not for weak-check or unverified ones, nor for range-limited ones
unless the target accepts them (``accept_range_limited``): the kernel is applied to a
fresh worktree of the base branch (the user's checkout is never touched), committed as the
bot, force-pushed to ``maxcode/optimize-<target>`` (the only branches it writes), and the
pull request for that branch is opened, or updated when one is open.

Across runs it remembers two things, both read from the repository itself:

- what reviewers said (:mod:`.memory`): a PR closed without merging holds the target back
  until its reference changes or a kernel is clearly faster than the rejected one; the label
  ``maxcode:never`` holds it back for good;
- what was merged: the base branch's ``maxcode.lock``. A kernel accepted there is the
  baseline: the search starts from it and measures it again beside the new candidates, and a
  new one is proposed only when its interval's low end clears both that interval and
  ``replace_margin`` (default 1.10) times that speedup (the lock's quote where the run did not
  measure it); the PR says that it replaces it.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._extras import require
from ..apply import apply_target, is_program, range_held, verified_source, written_paths
from ..errors import MaxcodeError
from ..model.jsontypes import JSON
from ..model.report import BestKernel, Report, TargetResult, TargetStatus, parse_report, parse_target
from ..targets.accept import EXTENSIONS, reference_hash_in_file
from ..targets.lock import KERNELS_DIR, LOCK_NAME, LockEntry, parse_lock
from . import memory, pr_body
from .github import DEFAULT_MAX_WAIT, GitHubUnavailable, client, error, pygithub, scrub

if TYPE_CHECKING:
    from github import Github
    from github.PullRequest import PullRequest
    from github.Repository import Repository

BRANCH_PREFIX = "maxcode/optimize-"
DEFAULT_AUTHOR = "maxcode-bot <maxcode-bot@users.noreply.github.com>"
#: a kernel replaces the accepted one only when its interval's low end is this many times its speedup
DEFAULT_REPLACE_MARGIN = 1.10


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


def _gitpython() -> ModuleType:
    return require("git", "maxcode pr")


def branch_for(target_id: str) -> str:
    return BRANCH_PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "-", target_id).strip("-.")


def parse_author(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>\s*", text or "")
    if not m:
        raise MaxcodeError(f"--author {text!r}: write it as 'Name <email>'")
    return m.group("name"), m.group("email")


def why_not(t: TargetResult | Mapping[str, JSON]) -> str | None:
    """Why a target gets no pull request (None: it gets one)."""
    t = parse_target(t)
    if t.status != TargetStatus.VERIFIED or not t.verified:
        return f"not verified ({t.status}: {t.reason})"
    if t.weak_check:
        return "the correctness check was weak (outputs that barely depend on the inputs); no pull request for that"
    if not t.best:
        return "the report has no kernel for it"
    return range_held(t)


def _best(t: TargetResult) -> BestKernel:
    if t.best is None:  # why_not() turned such a target away
        raise MaxcodeError(f"{t.id}: the report has no kernel for it")
    return t.best


def _kernel(t: TargetResult, root: Path) -> tuple[str, str]:
    source = verified_source(t, root)
    return source, hashlib.sha256(source.encode()).hexdigest()[:16]


def below_accepted(nums: pr_body.Numbers, margin: float) -> str | None:
    """Why a kernel does not replace the accepted one (None: it does): its interval's low end must
    reach ``margin`` times the accepted speedup, both measured against the original. Where the
    search measured the accepted kernel beside the new one (it starts from it), that head-to-head
    figure is the bar, and the intervals must not overlap; else the lock's quote, from another run."""
    assert nums.accepted is not None
    bar = nums.accepted * margin
    if nums.accepted_here:
        top = max(bar, nums.accepted_ci[1] if nums.accepted_ci else nums.accepted)
        if nums.low > top:
            return None
        return (f"not clearly faster than the kernel accepted on the base branch, measured beside it in this run "
                f"({nums.accepted:.3g}x{pr_body.ci_text(nums.accepted_ci)}): this one's interval starts at {nums.low:.3g}x, "
                f"not above {top:.3g}x (the accepted one's interval end, and {margin:g} times its speedup)")
    if nums.low >= bar:
        return None
    return (f"not clearly faster than the kernel accepted on the base branch ({nums.accepted:.3g}x, as its lock entry "
            f"quotes it: this run did not measure it): this one's interval starts at {nums.low:.3g}x, below {bar:.3g}x "
            f"({margin:g} times the accepted one)")


class Bot:
    def __init__(self, root: Path, report: Report | Mapping[str, JSON], *, repo_name: str, base: str | None, remote: str = "origin",
                 author: str = DEFAULT_AUTHOR, draft: bool = False, labels: tuple[str, ...] = (), dry_run: bool = False,
                 api_url: str | None = None, max_wait: float = DEFAULT_MAX_WAIT, timeout: float | None = None,
                 reject_margin: float = memory.DEFAULT_REJECT_MARGIN,
                 replace_margin: float = DEFAULT_REPLACE_MARGIN) -> None:
        """Many parameters because they are ``maxcode pr``'s options, keyword-only, as the command passes
        them. ``max_wait``: the longest rate-limit wait sat out (seconds); ``timeout``: seconds per API
        request; ``reject_margin`` / ``replace_margin``: how much faster than a rejected / accepted kernel
        a new one must be (its interval's low end over their speedup). ``report`` is read here, once
        (a MaxcodeError, one line, for a malformed one)."""
        self.root = root
        self.report = parse_report(report)
        self.repo_name = repo_name
        self.base = base
        self.remote = remote
        self.author = parse_author(author)
        self.draft = draft
        self.labels = labels
        self.dry_run = dry_run
        self.api_url = api_url
        self.max_wait = max_wait
        self.timeout = timeout
        self.reject_margin = reject_margin
        self.replace_margin = replace_margin
        self.gh: Github | None = None
        self.token = ""
        self.suppressed: list[memory.Suppression] = []
        self._fetched = False

    # -- git --------------------------------------------------------------------------------

    def _git(self) -> Any:
        git = _gitpython()

        try:
            return git.Repo(self.root, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise MaxcodeError(f"{self.root} is not in a git repository; run maxcode pr in the project's checkout") from None

    def project_dir(self) -> str:
        """The project's folder relative to the repository's root, '.' at the root."""
        top = Path(self._git().working_tree_dir).resolve()
        return self.root.resolve().relative_to(top).as_posix()

    def _fetch_base(self) -> None:
        git = _gitpython()

        if self._fetched or self.dry_run:  # a dry run reads what was fetched before, and fetches nothing
            return
        try:
            self._git().git.fetch(self.remote, f"+refs/heads/{self.base}:refs/remotes/{self.remote}/{self.base}")
        except git.GitCommandError as e:
            raise MaxcodeError(f"git fetch {self.remote} {self.base}: {_git_error(e, self.token)}") from None
        self._fetched = True

    def _base_file(self, path: str) -> str | None:
        """A file of the base branch (path relative to the project), or None where it has none."""
        git = _gitpython()

        full = str(PurePosixPath(self.project_dir()) / path)
        try:
            blob = self._git().commit(f"{self.remote}/{self.base}").tree / full.removeprefix("./")
            return blob.data_stream.read().decode()
        except (KeyError, ValueError, git.BadName, git.GitCommandError, UnicodeDecodeError):
            return None

    def accepted(self, t: TargetResult) -> pr_body.Accepted | None:
        """The kernel the base branch's lock accepts for ``t`` and the dispatcher would run: None
        where there is none, or where it is stale (its file or the reference changed since)."""
        if is_program(t):
            return None
        self._fetch_base()
        lock_text = self._base_file(LOCK_NAME)
        if lock_text is None:
            return None
        try:
            entry = parse_lock(lock_text).get(t.id)
        except ValueError as e:
            raise MaxcodeError(f"{LOCK_NAME} on {self.remote}/{self.base}: {e}") from None
        if entry is None:
            return None
        source = self._base_file(entry.kernel)
        if source is None or hashlib.sha256(source.encode()).hexdigest() != entry.kernel_hash or not self._reference_holds(entry):
            return None
        return pr_body.Accepted(entry.kernel, entry.kernel_hash, float(entry.speedup), pr_body.interval(entry.speedup_ci),
                                entry.date, entry.tool_version, source, entry.lang)

    def _reference_holds(self, entry: LockEntry) -> bool:
        """The base branch's reference still hashes as the lock says (else the kernel is not in use)."""
        ref_file, qualname = entry.extra.get("reference_file"), entry.extra.get("qualname")
        if not ref_file or not qualname:
            return True  # an older lock names no reference file: take the entry as it stands
        text = self._base_file(str(ref_file))
        if text is None:
            return False
        with tempfile.TemporaryDirectory(prefix="maxcode-ref-") as tmp:
            path = Path(tmp) / "reference.py"
            path.write_text(text)
            return reference_hash_in_file(path, str(qualname)) == entry.reference_hash

    def reference_hash(self, t: TargetResult) -> str:
        """The hash of the reference the report's search ran against ('' where it cannot be found):
        a program's is in the report; a function's is taken from the checkout the report was made in,
        the way ``maxcode.lock`` hashes it."""
        ref = t.reference
        if ref is None:
            return ""
        if ref.hash:
            return str(ref.hash)
        if not ref.file or not ref.qualname:
            return ""
        return reference_hash_in_file(self.root / str(ref.file), str(ref.qualname)) or ""

    def _branch_message(self, branch: str) -> str | None:
        """The commit message at the tip of the bot's branch on the remote (None: no such branch)."""
        git = _gitpython()

        repo = self._git()
        try:
            repo.git.fetch(self.remote, f"+refs/heads/{branch}:refs/remotes/{self.remote}/{branch}")
            return str(repo.commit(f"{self.remote}/{branch}").message)
        except (git.GitCommandError, git.BadName, ValueError):
            return None

    def push_branch(self, t: TargetResult, branch: str, message: str) -> bool:
        """Commit the applied kernel on top of the base in a throwaway worktree and force-push it
        to the bot's branch; False when applying it changes nothing (already on the base)."""
        git = _gitpython()

        repo = self._git()
        self._fetch_base()
        sub = Path(self.project_dir())
        with tempfile.TemporaryDirectory(prefix="maxcode-pr-") as tmp:
            repo.git.worktree("add", "--detach", tmp, f"{self.remote}/{self.base}")
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

    def _connect(self) -> Repository:
        if self.gh is None:
            self.gh, self.token = client(self.api_url, timeout=self.timeout, max_wait=self.max_wait)
        github = pygithub()

        try:
            repo = self.gh.get_repo(self.repo_name)
        except (github.GithubException, OSError) as e:
            raise error(e, f"opening {self.repo_name}", self.token, self.timeout) from None
        if self.base is None:
            self.base = repo.default_branch
        return repo

    def run(self) -> list[Outcome]:
        _gitpython()  # the bot's extra is checked before any target, so a CI job learns it on its first run
        if not self.dry_run:
            pygithub()
        todo = [(t, why_not(t)) for t in self.report.targets]
        outcomes = [Outcome(t.id, "skipped", why) for t, why in todo if why]
        ready = [t for t, why in todo if not why]
        if not ready:
            return outcomes
        repo = None if self.dry_run else self._connect()
        if self.base is None:
            self.base = "main"
        owner = self.repo_name.split("/")[0]
        down: str | None = None
        for t in ready:
            if down:  # GitHub is unavailable: the other targets would fail the same way
                outcomes.append(Outcome(t.id, "skipped", "not tried: GitHub is unavailable (see above)"))
                continue
            try:
                outcomes.append(self._one(repo, owner, t))
            except GitHubUnavailable as e:
                down = str(e)
                outcomes.append(Outcome(t.id, "failed", down))
            except MaxcodeError as e:
                outcomes.append(Outcome(t.id, "failed", str(e)))
        if not self.dry_run and not down:
            memory.write_record(self.root, self.repo_name, self.base, self.suppressed)
        return outcomes

    def _pulls(self, repo: Any, owner: str, branch: str) -> tuple[list[PullRequest], list[PullRequest]]:
        """The bot's closed and open pull requests from ``branch`` into the base."""
        github = pygithub()

        head = f"{owner}:{branch}"
        try:
            closed = list(repo.get_pulls(state="closed", head=head, base=self.base))
            return closed, list(repo.get_pulls(state="open", head=head, base=self.base))
        except (github.GithubException, OSError) as e:
            raise error(e, f"looking up the pull requests for {branch}", self.token, self.timeout) from None

    def _one(self, repo: Any, owner: str, t: TargetResult) -> Outcome:
        source, kernel_hash = _kernel(t, self.root)
        accepted = self.accepted(t)
        if accepted and accepted.kernel_hash == hashlib.sha256(source.encode()).hexdigest():
            return Outcome(t.id, "skipped", f"this kernel is already accepted on {self.base}")
        accepted = accepted.measured_in(t) if accepted else None
        nums = pr_body.numbers(t, accepted)
        if accepted and (held := below_accepted(nums, self.replace_margin)):
            return Outcome(t.id, "skipped", held)
        branch = branch_for(t.id)
        kernel_path = written_paths(t)[0] if is_program(t) else f"{KERNELS_DIR}/{t.id}{EXTENSIONS[_best(t).lang]}"
        where = pr_body.Where(branch, kernel_path, kernel_hash, self.project_dir(), self.remote, self.base)
        machine = self.report.machine
        title = pr_body.title(t, machine, nums)
        text = pr_body.body(t, self.report, source=source, where=where, accepted=accepted, nums=nums,
                            reference_hash=self.reference_hash(t))
        if self.dry_run:
            return Outcome(t.id, "would open or update", f"branch {branch} onto {self.base}\n\n# {title}\n\n{text}")
        closed, open_prs = self._pulls(repo, owner, branch)
        # an open PR is the bot's current proposal, reviewed or not: it is kept up to date whatever was closed before it
        held_back = None if open_prs else memory.suppression(
            t.id, kernel_hash=kernel_hash, reference=self.reference_hash(t), low=nums.low,
            found=memory.rejections(closed, t.id), margin=self.reject_margin)
        if held_back:
            self.suppressed.append(held_back)
            return Outcome(t.id, "skipped", f"{held_back.why}; to lift it: {held_back.lift}")
        message = pr_body.commit_message(t, machine, nums, kernel_hash, accepted)
        same = bool(open_prs) and (pr_body.parse_marker(open_prs[0].body) or ("", ""))[1] == kernel_hash
        # the same kernel and numbers again: keep the commit (and the review comments anchored to it);
        # new numbers get a new commit of the same tree, so the commit message never quotes old ones
        if not (same and self._branch_message(branch) == message) and not self.push_branch(t, branch, message):
            return Outcome(t.id, "skipped", f"this kernel is already on {self.base}")
        action, url = self._open_or_update(repo, open_prs, branch, title, text)
        replaces = f", replaces the accepted {nums.accepted:.3g}x" if nums.accepted else ""
        return Outcome(t.id, action, f"{nums.x}{replaces}, kernel {kernel_hash}", url)

    def _open_or_update(self, repo: Any, open_prs: list[PullRequest], branch: str, title: str, text: str) -> tuple[str, str]:
        """The open pull request from ``branch`` edited to this title and text, else a new one;
        returns what was done ("updated" or "opened") and the pull request's address."""
        github = pygithub()

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
            doing = f"{'updating' if open_prs else 'opening'} the pull request for {branch}"
            raise error(e, doing, self.token, self.timeout) from None
        return action, pr.html_url


def _git_error(e: Exception, token: str) -> str:
    text = " ".join(str(getattr(e, "stderr", "") or e).split())
    return scrub(text, token)[:400]
