"""What reviewers said, remembered per target: a bot PR closed without merging holds back new PRs
for that target until its reference changes, or until a kernel is clearly faster than the
rejected one (the new interval's low end at least ``margin`` times the rejected speedup,
default 1.25); the label ``maxcode:never`` on a closed PR holds the target back for good.

The memory is read from GitHub itself on every run (the closed PRs of the bot's branch for the
target, their marker and labels), so it holds across CI runs with no local state, and a
reviewer changes it with GitHub's own buttons: reopen the PR, or remove the label. Each run
also writes what it found to ``.maxcode/bot/suppressed.json`` so that ``maxcode status`` (and a
job summary) can show it offline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._files import write_atomic
from .pr_body import parse_marker_fields

DEFAULT_REJECT_MARGIN = 1.25
NEVER_LABEL = "maxcode:never"
RECORD = Path(".maxcode") / "bot" / "suppressed.json"


@dataclass(frozen=True)
class Rejection:
    """A bot PR for the target closed without merging, as its marker and labels describe it."""

    number: int
    url: str
    kernel: str
    reference: str  # '' for a PR opened before markers carried it
    speedup: float | None
    never: bool


@dataclass(frozen=True)
class Suppression:
    target: str
    why: str
    lift: str

    def line(self) -> str:
        return f"{self.target}: no new pull request: {self.why}; to lift it: {self.lift}"


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def rejections(pulls: Iterable[Any], target_id: str) -> list[Rejection]:
    """The bot's closed, unmerged PRs for ``target_id`` among ``pulls`` (PyGithub pull requests as
    listed: ``merged_at`` and ``labels`` come with the list, no extra request per PR)."""
    out = []
    for pr in pulls:
        if pr.merged_at is not None:
            continue
        fields = parse_marker_fields(pr.body)
        if fields.get("target") != target_id:
            continue
        never = any(label.name.lower() == NEVER_LABEL for label in pr.labels)
        out.append(Rejection(pr.number, pr.html_url, fields["kernel"], fields.get("reference", ""),
                             _float(fields.get("speedup")), never))
    return out


def suppression(target_id: str, *, kernel_hash: str, reference: str, low: float, found: list[Rejection],
                margin: float = DEFAULT_REJECT_MARGIN) -> Suppression | None:
    """Why no PR may be opened for this kernel now (None: it may). ``low``: the new kernel's
    interval low end (its speedup where the report has no interval)."""
    never = [r for r in found if r.never]
    if never:
        r = never[0]
        return Suppression(target_id, f"#{r.number} was closed with the label {NEVER_LABEL} ({r.url})",
                           f"remove the label {NEVER_LABEL} from #{r.number}")
    # the very kernel rejected against this reference (or a PR too old to name its reference)
    same_kernel = [r for r in found if r.kernel == kernel_hash and r.reference in ("", reference)]
    if same_kernel:
        r = same_kernel[0]
        return Suppression(target_id, f"#{r.number} with this very kernel was closed without merging ({r.url})",
                           f"reopen #{r.number}, or change the reference")
    # a rejection counts while the reference it was searched against is the reference now
    standing = [r for r in found if r.reference and r.reference == reference and r.speedup]
    if not standing:
        return None
    worst = max(standing, key=lambda r: r.speedup or 0.0)
    bar = (worst.speedup or 0.0) * margin
    if low >= bar:
        return None
    return Suppression(
        target_id,
        f"#{worst.number} (a {worst.speedup:.3g}x kernel) was closed without merging ({worst.url}), and this kernel's "
        f"interval starts at {low:.3g}x, below {bar:.3g}x ({margin:g} times the rejected one)",
        f"reopen #{worst.number}, change the reference, or find a kernel whose interval starts at {bar:.3g}x or more",
    )


def write_record(root: Path, repo_name: str, base: str, found: list[Suppression]) -> None:
    """What this run held back, for ``maxcode status`` (replaced on every run that reached GitHub)."""
    data = {"checked": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repo": repo_name, "base": base,
            "targets": {s.target: asdict(s) for s in found}}
    path = root / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def status_lines(root: Path) -> list[str]:
    """One line per target the bot holds back, with how to lift it, as the last ``maxcode pr`` found
    it ([] when it found none or never ran here). For ``maxcode status`` and the job summary."""
    try:
        data = json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return []
    when = f" (as of maxcode pr on {data.get('checked', '?')}, {data.get('repo', '?')} {data.get('base', '?')})"
    out = []
    for target, s in sorted((data.get("targets") or {}).items()):
        try:
            out.append(Suppression(target, str(s["why"]), str(s["lift"])).line() + when)
        except (KeyError, TypeError):
            continue
    return out
