"""Program targets: whole C++ programs that read stdin and write stdout, declared in
``[tool.maxcode.programs.NAME]`` and judged on their test cases the way PIE judges them.

A function target is found by its decorator; a program has no Python to decorate, so the
project's configuration names its source file and a folder of test cases
(``input.<k>.txt`` fed on stdin, ``output.<k>.txt`` expected on stdout)::

    [tool.maxcode.programs.prefix_sums]
    source = "src/prefix_sums.cpp"
    testcases = "tests/prefix_sums"
    # optional: cxxflags = "-O3 --std=c++17", timeout = 10, timer = "wall" | "instructions",
    #           rounds = 5, budget = 8, min_speedup = 1.05,
    #           tests = ["tests/test_prefix_sums.py"]  (pytest tests re-run with the rewrite in place)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx")
DEFAULT_CXXFLAGS = "-O3 --std=c++17"
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
KEYS = ("source", "testcases", "cxxflags", "timeout", "timer", "rounds", "budget", "min_speedup", "tests")


@dataclass(frozen=True)
class ProgramTarget:
    id: str
    source: Path  # relative to the project root
    testcases: Path  # relative to the project root
    cxxflags: tuple[str, ...] = tuple(DEFAULT_CXXFLAGS.split())
    timeout: float = 10.0  # seconds per test case run
    timer: str = "wall"  # or "instructions" (callgrind: deterministic counts)
    rounds: int = 5  # timed rounds at least, each running every test case once per side
    budget: int | None = None
    min_speedup: float | None = None
    #: pytest paths or node ids, relative to the root, re-run against a copy of the project
    #: that holds the rewrite: a program's test cases may not be all its users rely on
    tests: tuple[str, ...] = ()


def parse_programs(raw: Any, root: Path) -> list[ProgramTarget]:
    """``[tool.maxcode.programs]`` as targets; ValueError with one line naming the key to fix."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ValueError("programs must be a table: [tool.maxcode.programs.NAME] with source and testcases")
    out = []
    for name, table in raw.items():
        where = f"[tool.maxcode.programs.{name}]"
        if not NAME.fullmatch(name):
            raise ValueError(f"{where}: a program's name may use letters, digits, '_', '.' and '-' only")
        if not isinstance(table, dict):
            raise ValueError(f"{where}: must be a table with source and testcases")
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise ValueError(f"{where}: no setting {unknown[0]!r} (known: {', '.join(KEYS)})")
        out.append(_program(name, table, root, where))
    return out


def _program(name: str, t: dict[str, Any], root: Path, where: str) -> ProgramTarget:
    for key in ("source", "testcases"):
        if not isinstance(t.get(key), str) or not t[key]:
            raise ValueError(f"{where}: set {key} = \"PATH\" (relative to {root})")
    source, tests = Path(t["source"]), Path(t["testcases"])
    if source.is_absolute() or tests.is_absolute():
        raise ValueError(f"{where}: source and testcases are paths relative to the project root, not absolute")
    if source.suffix.lower() not in SOURCE_SUFFIXES:
        raise ValueError(f"{where}: source {source} is not a C++ file ({', '.join(SOURCE_SUFFIXES)})")
    if not (root / source).is_file():
        raise ValueError(f"{where}: source {source}: no such file under {root}")
    if not (root / tests).is_dir():
        raise ValueError(f"{where}: testcases {tests}: no such folder under {root}")
    flags = t.get("cxxflags", DEFAULT_CXXFLAGS)
    try:
        cxxflags = tuple(shlex.split(flags)) if isinstance(flags, str) else None
    except ValueError:
        cxxflags = None
    if cxxflags is None:
        raise ValueError(f"{where}: cxxflags must be one string of g++ flags, such as {DEFAULT_CXXFLAGS!r}")
    timer = t.get("timer", "wall")
    if timer not in ("wall", "instructions"):
        raise ValueError(f"{where}: timer must be \"wall\" or \"instructions\", not {timer!r}")
    return ProgramTarget(
        name, source, tests, cxxflags,
        timeout=_number(t, "timeout", 10.0, where), timer=timer, rounds=_count(t, "rounds", 5, where),
        budget=_count(t, "budget", None, where), min_speedup=_number(t, "min_speedup", None, where),
        tests=_tests(t.get("tests", []), root, where, name),
    )


def _tests(v: Any, root: Path, where: str, name: str) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f'{where}: tests must be a list of pytest paths or node ids, such as ["tests/test_{name}.py"]')
    for item in items:
        path = Path(item.split("::", 1)[0])
        if path.is_absolute() or not (root / path).exists():
            raise ValueError(f"{where}: tests: {path}: no such file or folder under {root}")
    return tuple(items)


def _number(t: dict[str, Any], key: str, default: float | None, where: str) -> Any:
    v = t.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
        raise ValueError(f"{where}: {key} must be a number greater than 0, not {v!r}")
    return None if v is None else float(v)


def _count(t: dict[str, Any], key: str, default: int | None, where: str) -> Any:
    v = t.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"{where}: {key} must be a positive integer, not {v!r}")
    return v
