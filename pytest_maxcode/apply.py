"""Applying a report: each verified best kernel into ``maxcode_kernels/`` and ``maxcode.lock``.

Only ``verified`` targets are applied: faster with a strong check, and the user's own
tests passed with the kernel active.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .targets.accept import accept


def apply_report(report: dict[str, Any], root: Path) -> list[str]:
    """Apply every verified target; one line per target saying what happened."""
    lines = []
    for t in report.get("targets", []):
        if t.get("status") != "verified" or not t.get("best"):
            lines.append(f"{t.get('id')}: not applied ({t.get('status')}: {t.get('reason', '')})")
            continue
        entry = apply_target(t, root)
        lines.append(f"{t['id']}: applied {entry.kernel} ({t['speedup']:.3g}x) to maxcode.lock")
    return lines


def apply_target(t: dict[str, Any], root: Path, source_root: Path | None = None) -> Any:
    """Write one verified target's kernel and lock entry under ``root``; the kernel source is
    read from ``source_root`` (where the run wrote its report; default ``root``), so the bot can
    apply into a fresh worktree of the base branch."""
    best, ref = t["best"], t["reference"]
    return accept(
        root,
        target_id=t["id"],
        reference_file=root / ref["file"],
        qualname=ref["qualname"],
        kernel_source=((source_root or root) / best["source_path"]).read_text(),
        lang=best["lang"],
        device=t.get("device", "cpu"),
        arch=t.get("arch", ""),
        speedup=t["speedup"],
        speedup_ci=t["speedup_ci"],
        signatures=t.get("signatures", []),
        outputs=t.get("outputs", {}),
        returns=t.get("returns"),
    )
