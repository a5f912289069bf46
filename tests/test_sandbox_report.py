"""The sandbox a target's candidates ran in is named in the report; a weak one is flagged everywhere."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from pytest_maxcode.bot.pr_body import body
from pytest_maxcode.report import render_html, render_markdown, render_terminal
from test_report import sample_report

WEAK = "none (not enforced: no namespaces: the candidate sees the network, every process and every file of this user)"


def with_sandbox(kind: str) -> dict[str, Any]:
    report = copy.deepcopy(sample_report())
    for t in report["targets"]:
        t["sandbox"] = kind
    return report


def renderings(report: dict[str, Any]) -> dict[str, str]:
    console = Console(record=True, width=200)
    render_terminal(report, console)
    return {"terminal": console.export_text(), "markdown": render_markdown(report), "html": render_html(report)}


def test_a_run_without_a_sandbox_says_so_in_every_rendering() -> None:
    for name, text in renderings(with_sandbox(WEAK)).items():
        flat = " ".join(text.split())  # the terminal wraps long lines
        assert "not fully sandboxed: 2 target(s) ran candidate code under none" in flat, name
        assert "install bubblewrap" in flat, name


def test_a_sandboxed_run_carries_no_warning() -> None:
    for name, text in renderings(with_sandbox("bwrap")).items():
        assert "not fully sandboxed" not in text, name


def test_the_pull_request_body_warns_when_the_check_was_not_sandboxed() -> None:
    report = with_sandbox(WEAK)
    t = next(t for t in report["targets"] if t["status"] == "verified")

    def pr(target: dict[str, Any]) -> str:
        return body(target, report, source="int x;\n", kernel_path="maxcode_kernels/x.cpp", kernel_hash="h" * 64, branch="maxcode/x")

    weak = pr(t)
    assert "without a full OS sandbox: none (not enforced:" in weak
    assert "without a full OS sandbox" not in pr(dict(t, sandbox="bwrap"))
