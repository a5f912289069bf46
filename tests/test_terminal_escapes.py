"""Escape sequences a candidate writes (red team B, F5) reach no terminal: a compile error, a
reason or a file name is printed with its control characters escaped, while the JSON keeps
the text as the candidate wrote it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import DATA, run_maxcode

from pytest_maxcode._styles import terminal_safe

#: an OSC 8 hyperlink, a clear screen and colours, as the red team's ``#error`` line held them
PAYLOAD = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\x1b[31mPWNED\x1b[0m"
ARGS = ["--time-budget", "0.1", "--timeout", "30", "--max-memory", "256M"]


def test_controls_are_shown_escaped_and_text_kept() -> None:
    assert terminal_safe(PAYLOAD) == PAYLOAD.replace("\x1b", "\\x1b")
    assert terminal_safe("line\n\tindented é ✓") == "line\n\tindented é ✓"
    assert terminal_safe("\r\x07\x7f\x9b\u202e") == "\\x0d\\x07\\x7f\\x9b\\u202e"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The attack reference, an honest kernel, and a candidate whose name and compile error hold escapes."""
    project = tmp_path_factory.mktemp("escapes")
    shutil.copy(DATA / "attacks" / "ref.py", project / "ref.py")
    shutil.copy(DATA / "attacks" / "honest.cpp", project / "honest.cpp")
    (project / "esc\x1b[2J.cpp").write_text(f'#error "{PAYLOAD}"\nint x;\n')
    return project


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1", "COLUMNS": "120"}], ids=["plain", "colour"])
def test_no_escape_from_a_candidate_reaches_the_check_output(project: Path, env: dict[str, str]) -> None:
    result = run_maxcode(["check", "ref.py", "esc\x1b[2J.cpp", "honest.cpp", *ARGS], cwd=project, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "compile_error" in out and "PWNED" in out and "honest.cpp" in out
    assert "\\x1b[2J" in out and "\\x1b]8;;https://evil.example" in out  # what the candidate wrote, shown
    if not env:  # not a terminal: rich adds no escapes of its own, so there is none at all
        assert "\x1b" not in out, out
    else:  # rich colours the table; the candidate's sequences stay escaped
        assert "\x1b[2J" not in out and "\x1b]8;;https://evil" not in out and "\x1b[31mPWNED" not in out, out


def test_the_json_keeps_the_compile_error_as_written(project: Path) -> None:
    result = run_maxcode(["check", "ref.py", "esc\x1b[2J.cpp", *ARGS, "--json"], cwd=project)
    (verdict,) = result.verdicts
    assert verdict["status"] == "compile_error"
    assert verdict["candidate"].endswith("esc\x1b[2J.cpp")
    assert PAYLOAD in "\n".join(verdict["reasons"])
