"""A candidate as every layer passes it: its file, format, language and text (a plain type)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import MaxcodeError

#: native candidates by file suffix, and the language each is built as
NATIVE_EXTS = {".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".cu": "cuda"}


@dataclass
class CandidateSpec:
    path: Path
    format: str  # "native" | "compat"
    lang: str  # "cpp" | "cuda" | "py"
    text: str

    @classmethod
    def from_path(cls, path: str | Path) -> CandidateSpec:
        p = Path(path)
        if not p.is_file():
            raise MaxcodeError(f"candidate {p}: no such file")
        suffix = p.suffix.lower()
        if suffix in NATIVE_EXTS:
            return cls(p, "native", NATIVE_EXTS[suffix], p.read_text(errors="replace"))
        if suffix == ".py":
            return cls(p, "compat", "py", p.read_text(errors="replace"))
        raise MaxcodeError(f"candidate {p}: expected a .cpp, .cu (native) or .py (compat ModelNew) file")

    @property
    def hash(self) -> str:
        return candidate_hash(self.format, self.lang, self.text)


def candidate_hash(fmt: str, lang: str, text: str) -> str:
    """What names a candidate everywhere (store, report, lock): its format, language and text."""
    return hashlib.sha256(f"{fmt}\0{lang}\0{text}".encode()).hexdigest()


def is_source_of(text: str, lang: str, expected: str) -> bool:
    """Whether ``text`` is the candidate a report names by ``expected`` (its :func:`candidate_hash`,
    in whichever format it was checked: a kernel, a compat module or a whole program)."""
    return any(candidate_hash(fmt, lang, text) == expected for fmt in ("native", "compat", "program"))
