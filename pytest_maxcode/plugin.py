"""The pytest plugin (entry point ``pytest11: maxcode``).

Kept thin and import-light: without ``--maxcode`` it adds its options and nothing else,
and the oracle, torch and the store are imported only when a run asks for them.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from . import hookspec, options
from ._styles import terminal_safe
from .errors import MaxcodeError


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("maxcode", "pytest-maxcode: verified C++/CUDA speedups")
    options.add_to_pytest(group)


def pytest_configure(config: Any) -> None:
    if not config.getoption("maxcode", False):
        return
    if hasattr(config, "workerinput"):
        raise pytest.UsageError("--maxcode: run without pytest-xdist workers (-n); capture needs one process")
    cli = {o.name: config.getoption(f"maxcode_{o.name}") for o in options.for_scope(options.PYTEST)}
    try:
        settings = options.load_settings(cli, config.rootpath / "pyproject.toml")
    except ValueError as e:
        raise pytest.UsageError(f"maxcode: {e}") from None
    # the session brings the search, the oracle and torch: only a --maxcode run loads it, which keeps start-up fast
    from .session import MaxcodeSession

    try:
        session = MaxcodeSession(config, settings)
    except MaxcodeError as e:
        raise pytest.UsageError(f"maxcode: {e}") from None
    config.pluginmanager.register(session, "maxcode-session")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    session = config.pluginmanager.get_plugin("maxcode-session")
    if session is None:
        return
    if session.report is not None and session.report_json is not None:
        # rich and the report load only to print a run's report: keeps start-up fast
        from rich.console import Console

        from .report import render_terminal  # keeps start-up fast, as rich does

        buf = io.StringIO()
        width = getattr(getattr(terminalreporter, "_tw", None), "fullwidth", 80)
        render_terminal(session.report_json, Console(file=buf, width=max(40, width), force_terminal=False))
        terminalreporter.write_sep("=", "maxcode")
        # rendered without colours (not a terminal), so escaping the whole text leaves rich's styling alone
        terminalreporter.write(terminal_safe(buf.getvalue()))
        for kind, path in session.report_paths.items():
            terminalreporter.write_line(terminal_safe(f"maxcode {kind} report: {path}"))
        # the search layer, loaded by a --maxcode run only: keeps start-up fast
        from .search.policy import without_model_note

        searched = [t.id for t in session.report.targets if t.status != "skipped"]
        note = without_model_note(session.root, session.policy_name, searched)
        if note:
            terminalreporter.write_line(note)
    # the last word: why the exit status is not the tests' own
    if session.interrupted is not None:
        terminalreporter.write_line(f"maxcode: interrupted; wrote the report of {session.interrupted} finished target(s); "
                                    "resume with the same command", red=True)
    elif session.problem is not None:
        terminalreporter.write_line(terminal_safe(f"maxcode: {session.problem}"), red=True)
