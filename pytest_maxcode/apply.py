"""Applying a report: each verified best kernel into ``maxcode_kernels/`` and ``maxcode.lock``,
and each verified program rewrite over the program's source.

Only ``verified`` targets are applied: faster with a strong check, and the user's own
tests passed with the kernel active; a range-limited one (right on the captured inputs, wrong
on wider or special values) only where the target accepts that (``accept_range_limited``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._files import write_atomic
from .errors import MaxcodeError
from .model.candidate import is_source_of
from .model.report import ReferenceInfo, Report, TargetResult, TargetStatus, parse_report, parse_target, row_of
from .targets.accept import accept
from .targets.lock import KERNELS_DIR, LOCK_NAME, LockEntry, sha256_text


@dataclass(frozen=True)
class Applied:
    """What applying one target did: whether a file changed, and a kernel's lock entry
    (None for a program, whose rewrite replaces its source)."""

    target_id: str
    changed: bool
    entry: LockEntry | None = None


def apply_report(report: Report | Mapping[str, Any], root: Path) -> list[str]:
    """Apply every verified target; one line per target saying what happened. ``report`` is read
    once here (a MaxcodeError, one line, for a malformed one): the JSON a run wrote, or its :class:`Report`."""
    lines = []
    for t in parse_report(report).targets:
        if t.status != TargetStatus.VERIFIED or not t.best:
            lines.append(f"{t.id}: not applied ({t.status}: {t.reason})")
            continue
        held = range_held(t)
        if held:
            lines.append(f"{t.id}: not applied ({held})")
            continue
        if is_program(t):
            try:
                applied = apply_target(t, root)
            except MaxcodeError as e:
                lines.append(f"{t.id}: not applied: {e}")
                continue
            done = "rewrote" if applied.changed else "already has the rewrite in"
            lines.append(f"{t.id}: {done} {_reference(t).file} ({t.speedup:.3g}x)")
            continue
        try:
            applied = apply_target(t, root)
        except (MaxcodeError, ValueError, OSError, ImportError) as e:  # nothing was written: accept renders first
            lines.append(f"{t.id}: not applied: {e}")
            continue
        kernel = applied.entry.kernel if applied.entry is not None else "?"
        lines.append(f"{t.id}: applied {kernel} ({t.speedup:.3g}x) to maxcode.lock")
    return lines


def range_held(t: TargetResult) -> str | None:
    """Why a verified target is held back for its range (None: it is not): its best kernel is
    range-limited and the target does not set ``accept_range_limited``. The report entry carries
    both: ``range_limited`` (the verdict's text, or null) and ``accept_range_limited`` (resolved
    by ``options.accepts_range_limited`` when the run wrote the report)."""
    limited = t.range_limited
    if not limited or t.accept_range_limited is True:
        return None
    return (f"range-limited: {limited}; set accept_range_limited=True in @maxcode.optimize "
            "(or [tool.maxcode] accept_range_limited) to apply it anyway")


def is_program(t: TargetResult | Mapping[str, Any]) -> bool:
    """A program target's entry (its rewrite replaces a source file) rather than a kernel's; the
    PR body's renderer asks it of the report's JSON."""
    ref = t.reference if isinstance(t, TargetResult) else row_of(ReferenceInfo, t.get("reference"))
    return bool(ref is not None and ref.program)


def written_paths(t: TargetResult) -> list[str]:
    """What applying ``t`` writes, relative to the project root (what the bot commits)."""
    return [_reference(t).file] if is_program(t) else [KERNELS_DIR, LOCK_NAME]


def _reference(t: TargetResult) -> ReferenceInfo:
    if t.reference is None:
        raise MaxcodeError(f"{t.id}: the report does not say what the search ran against; run pytest --maxcode again")
    return t.reference


def verified_source(t: TargetResult, root: Path) -> str:
    """The text of the kernel the report's numbers belong to, read from under ``root``: never a
    file that changed after the run verified it (the report names it by hash)."""
    best = t.best
    if best is None:
        raise MaxcodeError(f"{t.id}: the report has no kernel for it")
    path = root / best.source_path
    try:
        text = path.read_text()
    except OSError:
        raise MaxcodeError(f"{t.id}: the report's kernel {path} is gone; run pytest --maxcode again") from None
    if best.hash and not is_source_of(text, best.lang, best.hash):
        raise MaxcodeError(f"{t.id}: {path} is not the kernel the run verified (it changed since: its hash is not the "
                           f"report's {best.hash[:16]}); run pytest --maxcode again")
    return text


def apply_target(t: TargetResult | Mapping[str, Any], root: Path, source_root: Path | None = None) -> Applied:
    """Write one verified target's kernel and lock entry under ``root``; the kernel source is
    read from ``source_root`` (where the run wrote its report; default ``root``), so the bot can
    apply into a fresh worktree of the base branch. A program target's rewrite replaces the
    program's source instead."""
    t = parse_target(t)
    held = range_held(t)
    if held:
        raise MaxcodeError(f"{t.id}: not applied: {held}")
    best, ref = t.best, _reference(t)
    if best is None or t.speedup is None or t.speedup_ci is None:
        raise MaxcodeError(f"{t.id}: the report quotes no measured kernel for it; run pytest --maxcode again")
    kernel_source = verified_source(t, source_root or root)
    if is_program(t):
        return Applied(t.id, _rewrite_program(root / ref.file, ref.file, ref.hash, kernel_source))
    entry = accept(
        root,
        target_id=t.id,
        reference_file=root / ref.file,
        qualname=ref.qualname,
        kernel_source=kernel_source,
        lang=best.lang,
        device=t.device_or_default(),
        arch=t.arch if t.arch is not None else "",
        speedup=t.speedup,
        speedup_ci=t.speedup_ci,
        signatures=t.signatures if t.signatures is not None else [],
        outputs=t.outputs if t.outputs is not None else {},
        returns=t.returns,
        pack=t.pack,
        module_state=t.module_state,
        eval_only=t.eval_only is True,
        range_limited=t.range_limited,
        accept_range_limited=t.accept_range_limited is True,
        build_id=best.build_id or "",
        library_sha256=best.sha256 or "",
    )
    return Applied(t.id, True, entry)


def _rewrite_program(path: Path, name: str, searched_hash: str, text: str) -> bool:
    """Replace the program atomically, only if it is still the program the search started from."""
    try:
        current = path.read_text()
    except OSError:
        raise MaxcodeError(f"{name} is gone; run pytest --maxcode again") from None
    if current == text:
        return False
    if sha256_text(current) != searched_hash:
        raise MaxcodeError(f"{name} changed since the search; run pytest --maxcode again to optimize the new version")
    write_atomic(path, text)
    return True
