"""``maxcode.lock``: which kernel is accepted for which target, and under what conditions.

TOML, committed next to ``maxcode_kernels/``. An entry is only honoured while the
reference's source still hashes to ``reference_hash`` and the kernel file to
``kernel_hash``: edit either, and the target falls back to its reference.

Where the entry also names the library that was verified (``library_sha256``, with
``build_id``: the build key, cache folder and host it is valid for, see
``native.build.build_id``), a cached library of that build that hashes otherwise is never
loaded, even if the cache's own record was rewritten to match it: it is built again from
the verified source.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._files import write_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK_NAME = "maxcode.lock"
KERNELS_DIR = "maxcode_kernels"
LOCK_VERSION = 1


@dataclass
class LockEntry:
    target: str
    reference_hash: str
    kernel: str  # path relative to the lock file's directory
    kernel_hash: str
    lang: str  # "cpp" | "cuda" | "py"
    device: str  # "cpu" | "cuda"
    arch: str
    speedup: float
    speedup_ci: list[float]
    date: str
    tool_version: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: where the verified library's hash applies (``native.build.build_id``; '' where the lock binds none)
    build_id: str = ""
    #: that library's sha256, as the oracle's trusted side recorded it when it was built
    library_sha256: str = ""

    def library_expected(self, build_id: str) -> str:
        """The sha256 a library of ``build_id`` must have, or '' where the lock says nothing about it
        (another compiler, flags, checkout or host: their own build records hold)."""
        return self.library_sha256 if self.library_sha256 and build_id == self.build_id else ""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def find_lock(start: Path) -> Path | None:
    """The nearest ``maxcode.lock`` at or above ``start``."""
    for d in (start, *start.parents):
        p = d / LOCK_NAME
        if p.is_file():
            return p
    return None


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int) -> dict[str, LockEntry]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return _entries(data)


def parse_lock(text: str) -> dict[str, LockEntry]:
    """The entries of a lock file's text (the bot reads the base branch's lock from git, not a
    file). ValueError with what to do when it is not a valid lock."""
    try:
        return _entries(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, TypeError, AttributeError) as e:
        raise ValueError(f"not a valid maxcode.lock ({e}); fix it or delete it") from None


def _entries(data: dict[str, Any]) -> dict[str, LockEntry]:
    entries = {}
    for target, raw in data.get("targets", {}).items():
        known = {k: raw[k] for k in LockEntry.__dataclass_fields__ if k in raw and k != "target"}
        extra = {k: v for k, v in raw.items() if k not in LockEntry.__dataclass_fields__}
        entries[target] = LockEntry(target=target, **known, extra=extra)
    return entries


def read_lock(path: Path) -> dict[str, LockEntry]:
    try:
        return _read(str(path), path.stat().st_mtime_ns)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError, TypeError) as e:
        raise ValueError(f"{path}: not a valid maxcode.lock ({e}); fix it or delete it") from None


def render_lock(entries: dict[str, LockEntry]) -> str:
    """The lock file's text; rendered before anything is written, so a failure writes nothing."""
    import tomli_w  # only applying writes TOML: off the dispatcher's import path, keeps start-up fast

    doc: dict[str, Any] = {"version": LOCK_VERSION, "targets": {}}
    for target in sorted(entries):
        d = asdict(entries[target])
        d.pop("target")
        extra = d.pop("extra") or {}
        for optional in ("build_id", "library_sha256"):
            if not d[optional]:
                d.pop(optional)
        doc["targets"][target] = {**d, **extra}
    return "# Written by pytest-maxcode: the accepted kernels. Commit this file.\n" + tomli_w.dumps(doc)


def write_lock(path: Path, entries: dict[str, LockEntry]) -> None:
    """Write atomically: a crash mid-write never leaves half a lock file."""
    write_atomic(path, render_lock(entries))
