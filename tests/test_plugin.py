"""The pytest plugin, tested as pytest plugins are: pytester projects in subprocesses."""

from __future__ import annotations

import pytest


def test_plugin_is_registered_and_silent(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    assert any(line.startswith("plugins:") and "maxcode-" in line for line in lines)
    assert not [line for line in lines if "maxcode" in line.lower() and not line.startswith("plugins:")]


def test_options_are_listed_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    for flag in ("--maxcode", "--maxcode-device", "--maxcode-min-speedup"):
        assert flag in out
