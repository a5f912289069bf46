"""Building a target's report entry is pure; the optimize path writes its kernel file, once.

And a run without jsonschema (a dependency: only a broken install lacks it) says, in one line, that its
report was not checked against the schema.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_maxcode import session as session_mod
from pytest_maxcode.model.report import DEFAULT_DEVICE, Report, TargetResult, TargetStatus
from pytest_maxcode.model.search import Proposal
from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.loop import SearchResult
from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.search.state import SearchState

KERNEL = "// the best kernel\nextern \"C\" int f() { return 1; }\n"


def _result(root: Path) -> SearchResult:
    """A finished search of ``lib.f`` whose best node is a faster C++ kernel."""
    (root / "lib.py").write_text("def f(x):\n    return x\n")
    target = TargetInfo("lib.f", "lib", "f", root / "lib.py", "function")
    state = SearchState("lib.f")
    spec = CandidateSpec(root / "cand.cpp", "native", "cpp", KERNEL)
    verdict = Verdict(candidate="cand.cpp", status="faster", speedup=2.0, speedup_ci=[1.8, 2.2], reference_s=2e-3,
                      candidate_s=1e-3, hash="h1", reasons=["2.0x faster"])
    state.add(Proposal(spec=spec, origin="seed:fused.cpp"), verdict, step=0)
    workloads = [{"name": "w0", "signature": "f(x: float32[8])", "layout": ["x"], "arg_keys": ["x"], "outputs": [], "n_sets": 1}]
    return SearchResult(target, state, "the budget is spent", workloads, strategy="sweep", policy="builtin", device="cpu")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_building_a_report_entry_twice_writes_no_file(tmp_path: Path) -> None:
    result = _result(tmp_path)
    before = _files(tmp_path)
    first = session_mod._target_report(result, "lib.f", [], tmp_path)
    second = session_mod._target_report(result, "lib.f", [], tmp_path)
    assert _files(tmp_path) == before
    assert first.to_json() == second.to_json()
    assert first.status == TargetStatus.FASTER and first.best is not None
    assert first.best.source_path == ".maxcode/reports/kernels/lib.f.cpp"


def test_write_kernel_writes_the_file_the_entry_names(tmp_path: Path) -> None:
    result = _result(tmp_path)
    entry = session_mod._target_report(result, "lib.f", [], tmp_path)
    assert entry.best is not None
    session_mod._write_kernel(result, entry, tmp_path)
    assert (tmp_path / entry.best.source_path).read_text() == KERNEL


def test_write_kernel_writes_nothing_for_an_entry_without_a_kernel(tmp_path: Path) -> None:
    result = _result(tmp_path)
    result.error = "the worker died"
    entry = session_mod._target_report(result, "lib.f", [], tmp_path)
    assert entry.status == TargetStatus.FAILED and entry.best is None
    before = _files(tmp_path)
    session_mod._write_kernel(result, entry, tmp_path)
    assert _files(tmp_path) == before


def test_the_optimize_path_writes_the_kernel_once_before_verifying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _result(tmp_path)
    monkeypatch.setattr(session_mod, "search_target", lambda *a, **k: result)
    writes: list[str] = []
    real_write = session_mod._write_kernel

    def counted(r: SearchResult, entry: TargetResult, root: Path) -> None:
        writes.append(entry.id)
        real_write(r, entry, root)

    monkeypatch.setattr(session_mod, "_write_kernel", counted)
    seen: list[str] = []

    def verify(cap: Any, entry: TargetResult) -> None:  # what verification reads is already there
        assert entry.best is not None
        seen.append((tmp_path / entry.best.source_path).read_text())

    reference = SimpleNamespace(__qualname__="f", __module__="lib")
    options = SimpleNamespace(inplace=False, inputs=None, lang="cpp", atol=None, rtol=None, min_speedup=None, budget=None,
                              accept_range_limited=None)
    handle = SimpleNamespace(id="lib.f", kind="function", options=options, owner=None, reference=reference,
                             source_file=str(tmp_path / "lib.py"))
    cap = SimpleNamespace(handle=handle, callers=["test_lib.py::test_f"], calls=1, skipped=[], module=None)
    fake = SimpleNamespace(root=tmp_path, settings=SimpleNamespace(device_for=lambda lang: "cpu", accept_range_limited=None),
                           _say=lambda message: None, _search_context=lambda *a: None, _oracle_lock=threading.Lock(),
                           _verify=verify, _dispatch_overhead=lambda *a: None)
    entry = session_mod.MaxcodeSession._optimize(fake, cap, [tmp_path / "w0.pt"], store=None, run_id=1)  # type: ignore[arg-type]
    assert writes == ["lib.f"]
    assert seen == [KERNEL]
    assert entry.best is not None and (tmp_path / entry.best.source_path).read_text() == KERNEL


def _published(monkeypatch: pytest.MonkeyPatch, *, jsonschema: bool) -> list[str]:
    if not jsonschema:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema raises ImportError
    said: list[str] = []
    hook = SimpleNamespace(pytest_maxcode_report=lambda report, config: None)
    fake = SimpleNamespace(config=SimpleNamespace(hook=hook), _say=said.append)
    report = Report(tool_version="0", created_at="2026-01-01T00:00:00+0000",
                    machine={"host": "h", "cpu": "c", "cores": "1", "torch": "2", "device": "cpu"},
                    options={"budget": 1, "time": None, "min_speedup": 1.05, "apply": False, "policy": "builtin", "device": "cpu"},
                    targets=[])
    session_mod.MaxcodeSession._published(fake, report)  # type: ignore[arg-type]
    return said


def test_without_jsonschema_one_line_says_the_report_was_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _published(monkeypatch, jsonschema=False)
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith("warning: the report was not checked against its schema")
    assert "pip install jsonschema" in said[0]


def test_with_jsonschema_a_conforming_report_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jsonschema")
    assert _published(monkeypatch, jsonschema=True) == []


@pytest.mark.parametrize(("device", "expected"), [(None, DEFAULT_DEVICE), ("", DEFAULT_DEVICE), ("cuda", "cuda")])
def test_an_entry_that_names_no_device_means_the_default_one(device: str | None, expected: str) -> None:
    entry = TargetResult("lib.f", TargetStatus.VERIFIED, device=device)
    assert entry.device_or_default() == expected
