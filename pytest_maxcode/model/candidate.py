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
        return hashlib.sha256(f"{self.format}\0{self.lang}\0{self.text}".encode()).hexdigest()
