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

# the parser lives at the bottom layer, so the settings are checked when loaded (options imports
# nothing above it); it is re-exported here, where program targets belong
from ..tables import DEFAULT_CXXFLAGS, SOURCE_SUFFIXES, ProgramTarget, parse_programs

__all__ = ["DEFAULT_CXXFLAGS", "SOURCE_SUFFIXES", "ProgramTarget", "parse_programs"]
