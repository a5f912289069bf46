"""KernelBench problems: finding them in a checkout, selecting them, scaling their sizes.

A KernelBench problem file (DESIGN.md section 7) defines ``Model``, ``get_inputs()`` and
``get_init_inputs()``; its sizes are module-level integer constants (``batch_size = 16``,
``M = 1024``). Files are named ``<number>_<Name>.py`` under ``KernelBench/level<N>/``.
Parsed with ``ast`` only: problem code runs in workers, never in this process.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MaxcodeError

_FILE = re.compile(r"^(?P<number>\d+)_(?P<name>.+)\.py$")
#: constants that are not sizes: scaling them would change what the problem computes
NOT_SIZES = re.compile(r"kernel|stride|pad|dilation|group|axis|eps|momentum|alpha|beta|scale|factor|ratio|seed|heads",
                       re.IGNORECASE)
MIN_SIZE = 16  # integers below this are counts and hyper-parameters, not sizes


@dataclass(frozen=True)
class Problem:
    level: int
    number: int
    name: str
    path: Path

    @property
    def id(self) -> str:
        return f"L{self.level}/{self.number}_{self.name}"


def level_dir(root: Path, level: int) -> Path:
    """``DIR`` may be the repository, its ``KernelBench/`` folder, or the level folder itself."""
    for candidate in (root / "KernelBench" / f"level{level}", root / f"level{level}", root):
        if candidate.is_dir() and any(_FILE.match(p.name) for p in candidate.iterdir()):
            return candidate
    raise MaxcodeError(f"{root}: no KernelBench level {level} problems (expected KernelBench/level{level}/<N>_<Name>.py)")


def parse_selection(text: str | None) -> set[int] | None:
    """``"1-10,23"`` -> {1..10, 23}; None -> every problem."""
    if not text:
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise MaxcodeError(f"--problems {text!r}: use numbers and ranges, e.g. 1-10,23")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise MaxcodeError(f"--problems {text!r}: the range {part} runs backwards")
        out.update(range(lo, hi + 1))
    return out


def find_problems(root: Path, level: int, problems: str | None = None) -> list[Problem]:
    """The level's problems, by number, optionally only the selected ones."""
    d = level_dir(Path(root), level)
    wanted = parse_selection(problems)
    found = []
    for p in sorted(d.iterdir()):
        m = _FILE.match(p.name)
        if m and (wanted is None or int(m.group("number")) in wanted):
            found.append(Problem(level, int(m.group("number")), m.group("name"), p))
    found.sort(key=lambda pr: pr.number)
    if wanted is not None:
        missing = sorted(wanted - {p.number for p in found})
        if missing:
            raise MaxcodeError(f"--problems: level {level} has no problem {', '.join(map(str, missing[:5]))}"
                               + (" ..." if len(missing) > 5 else ""))
    if not found:
        raise MaxcodeError(f"{d}: no problems")
    return found


def scaled_source(source: str, scale: float) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """The problem with its module-level size constants multiplied by ``scale`` (at least 1),
    and what changed: ``{name: (old, new)}``. Hyper-parameters (kernel sizes, strides, axes,
    eps...) and small integers stay as they are."""
    if scale == 1.0:
        return source, {}
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    changes: dict[str, tuple[Any, Any]] = {}
    edits: list[tuple[int, int, int, str]] = []

    def size(c: ast.expr) -> bool:
        return isinstance(c, ast.Constant) and type(c.value) is int and c.value >= MIN_SIZE

    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value, name = node.value, node.targets[0].id
        if NOT_SIZES.search(name):
            continue
        consts = [value] if size(value) else [e for e in value.elts if size(e)] if isinstance(value, ast.Tuple) else []
        if not consts:
            continue
        old_new = [(c.value, max(1, int(round(c.value * scale)))) for c in consts]  # type: ignore[attr-defined]
        for c, (_, n) in zip(consts, old_new):
            edits.append((c.lineno - 1, c.col_offset, c.end_col_offset or c.col_offset, str(n)))
        olds, news = [a for a, _ in old_new], [b for _, b in old_new]
        changes[name] = (olds[0], news[0]) if consts == [value] else (tuple(olds), tuple(news))
    for line, start, end, text in sorted(edits, reverse=True):
        lines[line] = lines[line][:start] + text + lines[line][end:]
    return "".join(lines), changes
