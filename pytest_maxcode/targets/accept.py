"""Accepting a verified kernel: its file under ``maxcode_kernels/`` and its lock entry."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Sequence

from .._files import write_atomic
from .._version import __version__
from ..errors import MaxcodeError
from .handle import normalized_source_in_file
from .lock import KERNELS_DIR, LOCK_NAME, LockEntry, read_lock, render_lock, sha256_text

EXTENSIONS = {"cpp": ".cpp", "cuda": ".cu", "py": ".py"}


def reference_hash_in_file(reference_file: Path, qualname: str) -> str | None:
    source = normalized_source_in_file(reference_file, qualname)
    return None if source is None else sha256_text(source)


def accept(
    root: Path,
    *,
    target_id: str,
    reference_file: Path,
    qualname: str,
    kernel_source: str,
    lang: str,
    device: str,
    arch: str,
    speedup: float,
    speedup_ci: Sequence[float],
    signatures: Sequence[Sequence[Sequence[Any]]] = (),
    outputs: dict[str, Any] | None = None,
    returns: str | None = None,
    pack: str | None = None,
    module_state: Sequence[Any] | None = None,
    eval_only: bool = False,
    range_limited: str | None = None,
    accept_range_limited: bool = False,
    build_id: str = "",
    library_sha256: str = "",
) -> LockEntry:
    """Write the kernel and its entry.

    Many parameters because they are the lock entry's fields, keyword-only, each named where the
    caller has it (a report's target, a verdict); long because the entry is built here field by
    field, next to the order of the writes that must not be split.

    A range-limited kernel (``range_limited``: what it passed and failed beyond the captured
    inputs) is refused unless ``accept_range_limited``; an accepted one's lock entry says so.

    Everything that can fail (hashing the reference, reading the old lock, rendering the new
    one) happens before the first write; then the kernel file goes first, so the lock never
    names a missing file, and a failure never leaves a kernel that no lock entry names.
    """
    if range_limited and not accept_range_limited:
        raise MaxcodeError(f"{target_id}: range-limited ({range_limited}); set accept_range_limited=True for this target to accept it")
    ref_hash = reference_hash_in_file(reference_file, qualname)
    if ref_hash is None:
        raise ValueError(f"{reference_file}: cannot find {qualname} to hash it")
    kernel = root / KERNELS_DIR / f"{target_id}{EXTENSIONS[lang]}"
    entry = LockEntry(
        target=target_id,
        reference_hash=ref_hash,
        kernel=kernel.relative_to(root).as_posix(),
        kernel_hash=hashlib.sha256(kernel_source.encode()).hexdigest(),
        lang=lang,
        device=device,
        arch=arch,
        speedup=round(float(speedup), 4),
        speedup_ci=[round(float(x), 4) for x in speedup_ci],
        date=time.strftime("%Y-%m-%d"),
        tool_version=__version__,
        build_id=build_id,
        library_sha256=library_sha256,
        extra={
            "reference_file": reference_file.resolve().relative_to(root.resolve()).as_posix(),
            "qualname": qualname,
            **({"signatures": [list(map(list, s)) for s in signatures]} if signatures else {}),
            **({"outputs": outputs} if outputs else {}),
            **({"returns": returns} if returns else {}),
            **({"pack": pack} if pack else {}),
            **({"module_state": [list(s) for s in module_state]} if module_state else {}),
            **({"eval_only": True} if eval_only else {}),
            **({"range_limited": range_limited} if range_limited else {}),
        },
    )
    lock = root / LOCK_NAME
    entries = dict(read_lock(lock)) if lock.exists() else {}
    entries[target_id] = entry
    text = render_lock(entries)
    write_atomic(kernel, kernel_source)
    write_atomic(lock, text)
    return entry
