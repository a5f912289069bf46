"""The pytest plugin (entry point ``pytest11: maxcode``).

Kept thin and import-light: without ``--maxcode`` it adds its options and nothing else,
and the oracle, torch and the store are imported only when a run asks for them.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import options


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("maxcode", "pytest-maxcode: verified C++/CUDA speedups")
    options.add_to_pytest(group)


def pytest_configure(config: Any) -> None:
    if config.getoption("maxcode", False):
        raise pytest.UsageError(
            "--maxcode: optimizing marked targets is not in this version yet; "
            "check candidates with `maxcode check REFERENCE CANDIDATE...`"
        )
