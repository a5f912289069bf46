"""The three oracles and the store serve the search through the interfaces declared in
``model/protocols.py``; a class that drifts from them fails here, not in a search."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol

import pytest
from conftest import DATA

from pytest_maxcode.model.protocols import Candidate, EvaluationStore, OracleLike, OracleSettings, SearchStore
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.store import Store


def test_the_local_and_ray_oracles_are_oracles(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.ray_executor import RayOracle

    ref = parse_reference(str(DATA / "chain" / "ref.py"))
    for cls in (Oracle, RayOracle):
        oracle = cls(ref, CheckConfig(), tmp_path)  # constructing starts nothing
        assert isinstance(oracle, OracleLike), cls
        assert oracle.eval_key == CheckConfig().key()


def test_the_program_oracle_is_an_oracle(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.program import ProgramOracle
    from pytest_maxcode.targets.program import ProgramTarget

    (tmp_path / "prog.cpp").write_text("int main() { return 0; }\n")
    (tmp_path / "cases").mkdir()
    oracle = ProgramOracle(ProgramTarget("prog", Path("prog.cpp"), Path("cases")), CheckConfig(sandbox="none"), tmp_path)
    assert isinstance(oracle, OracleLike)


def test_the_sqlite_store_is_an_evaluation_store(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        assert isinstance(store, EvaluationStore)


def test_something_missing_a_member_is_not_an_oracle() -> None:
    class Half:
        config = CheckConfig()
        eval_key = "k"
        device = "cpu"

        def check(self, candidates: object) -> list:
            return []

    with pytest.raises(AssertionError):
        assert isinstance(Half(), OracleLike)


# ----------------------------------------------------------------------------- members and signatures

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
#: what ``typing`` puts on every protocol class, which no implementation is asked for
_TYPING_OWN = {"__init__", "__subclasshook__", "__init_subclass__", "__class_getitem__"}


def _members(protocol: type) -> dict[str, object]:
    """A protocol's own members, its bases' included: methods and properties by their object,
    plain attributes (``eval_key: str``) as None."""
    found: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol, Generic) or not getattr(klass, "_is_protocol", False):
            continue
        found.update(dict.fromkeys(klass.__dict__.get("__annotations__", {})))
        found.update({k: v for k, v in klass.__dict__.items()
                      if k not in _TYPING_OWN and (inspect.isfunction(v) or isinstance(v, property))})
    return found


def _loose(annotation: object) -> bool:
    """An annotation the class may spell its own way: ``Any`` or one of the protocol's type variables."""
    return annotation is _P.empty or annotation == "Any" or "CandidateT" in str(annotation)


def _same_type(want: object, have: object) -> bool:
    return _loose(want) or str(want).replace(" ", "") == str(have).replace(" ", "")


def _signature_drift(name: str, proto: Callable[..., object], impl: Callable[..., object]) -> list[str]:
    """How ``impl`` fails to take every call ``proto`` allows: each parameter the protocol names is
    taken the same way (position, name, keyword, default, annotation) and any the class adds has a
    default. Annotations are compared as written, except where the protocol leaves them open."""
    want_sig, have_sig = inspect.signature(proto), inspect.signature(impl)
    want, have = list(want_sig.parameters.values())[1:], list(have_sig.parameters.values())[1:]
    positional = [h for h in have if h.kind in _POSITIONAL]
    kinds = {h.kind for h in have}
    by_name = {h.name: h for h in have}
    problems: list[str] = []
    used: set[str] = set()
    for i, w in enumerate(p for p in want if p.kind in _POSITIONAL):
        h = positional[i] if i < len(positional) else None
        if h is None:
            ok = _P.VAR_POSITIONAL in kinds and (w.kind is _P.POSITIONAL_ONLY or _P.VAR_KEYWORD in kinds)
        else:
            used.add(h.name)
            ok = (w.kind is _P.POSITIONAL_ONLY or (h.kind is _P.POSITIONAL_OR_KEYWORD and h.name == w.name)) \
                and (w.default is _P.empty or h.default is not _P.empty) and _same_type(w.annotation, h.annotation)
        if not ok:
            problems.append(f"{name}: parameter {w} at position {i + 1}")
    for w in want:
        if w.kind is _P.KEYWORD_ONLY:
            h = by_name.get(w.name)
            if h is None:
                ok = _P.VAR_KEYWORD in kinds
            else:
                used.add(h.name)
                ok = h.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) \
                    and (w.default is _P.empty or h.default is not _P.empty) and _same_type(w.annotation, h.annotation)
            if not ok:
                problems.append(f"{name}: keyword parameter {w}")
        elif w.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) and w.kind not in kinds:
            problems.append(f"{name}: {w}")
    problems += [f"{name}: the class requires {h}, which the protocol does not name" for h in have
                 if h.name not in used and h.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) and h.default is _P.empty]
    if not _same_type(want_sig.return_annotation, have_sig.return_annotation):
        problems.append(f"{name}: returns {have_sig.return_annotation}, the protocol {want_sig.return_annotation}")
    return [f"{p} (protocol {want_sig}, class {have_sig})" for p in problems]


def _drift(obj: object, protocol: type) -> list[str]:
    """Every way ``obj`` falls short of ``protocol``: a member missing, a method where data is
    named (or the reverse), a method whose signature the protocol's calls would not fit."""
    problems: list[str] = []
    for name, member in _members(protocol).items():
        if not hasattr(obj, name):
            problems.append(f"{name}: missing")
        elif inspect.isfunction(member):
            impl = inspect.getattr_static(type(obj), name, None)
            if not inspect.isfunction(impl):
                problems.append(f"{name}: not a method of {type(obj).__name__}")
            else:
                problems += _signature_drift(name, member, impl)
        elif inspect.ismethod(getattr(obj, name)):
            problems.append(f"{name}: a method, where the protocol names a value")
    return [f"{type(obj).__name__} against {protocol.__name__}: {p}" for p in problems]


def _oracles(tmp_path: Path) -> list[object]:
    from pytest_maxcode.oracle.program import ProgramOracle
    from pytest_maxcode.oracle.ray_executor import RayOracle
    from pytest_maxcode.targets.program import ProgramTarget

    ref = parse_reference(str(DATA / "chain" / "ref.py"))
    (tmp_path / "prog.cpp").write_text("int main() { return 0; }\n")
    (tmp_path / "cases").mkdir()
    program = ProgramTarget("prog", Path("prog.cpp"), Path("cases"))
    return [Oracle(ref, CheckConfig(), tmp_path), RayOracle(ref, CheckConfig(), tmp_path),
            ProgramOracle(program, CheckConfig(sandbox="none"), tmp_path)]


def test_every_oracle_has_each_member_the_protocol_names_with_a_signature_its_calls_fit(tmp_path: Path) -> None:
    problems = []
    for oracle in _oracles(tmp_path):
        problems += _drift(oracle, OracleLike)
        problems += _drift(oracle.config, OracleSettings)  # type: ignore[attr-defined]
    assert problems == []


def test_the_sqlite_store_has_each_member_the_search_and_the_oracles_call(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        assert isinstance(store, SearchStore)
        assert _drift(store, EvaluationStore) + _drift(store, SearchStore) == []


def test_the_oracles_candidates_are_candidates(tmp_path: Path) -> None:
    assert _drift(CandidateSpec(tmp_path / "k.cpp", "native", "cpp", "int f();"), Candidate) == []


def test_the_protocols_name_what_the_search_and_the_oracles_call() -> None:
    """The members these tests compare: a protocol that loses one (the loop's ``prepare``, the
    oracles' ``upsert_target``) no longer covers its callers."""
    assert {"prepare", "workloads", "check", "close", "config", "eval_key", "device"} <= set(_members(OracleLike))
    assert {"upsert_target", "add_candidate", "record_evaluation", "find_evaluation"} <= set(_members(EvaluationStore))
    assert {"add_node", "llm_totals"} <= set(_members(SearchStore)) - set(_members(EvaluationStore))


def test_a_class_that_drifts_from_a_protocol_is_named_with_how() -> None:
    class Drifted:
        def upsert_target(self, target: str, kind: str, source_path: str, source_hash: str) -> None: ...

        def record_evaluation(self, run_id: int | None, target_id: str, config_key: str, device: str,
                              verdict: dict[str, Any]) -> int: ...

        def find_evaluation(self, target_id: str, candidate_hash: str, config_key: str, extra: int) -> None: ...

        def add_candidate(self, cand_hash: str, fmt: str, lang: str, source: str, origin: str) -> None: ...

        def candidate(self, cand_hash: str) -> dict[str, Any] | None: ...

        nodes = None

    problems = "\n".join(_drift(Drifted(), EvaluationStore))
    assert "upsert_target: parameter target_id" in problems  # renamed: a keyword call would fail
    assert "find_evaluation: the class requires extra" in problems
    assert "find_evaluation: returns None" in problems
    assert "nodes: not a method" in problems
    assert "add_candidate" not in problems and "candidate:" not in problems
    assert "record_evaluation" not in problems  # keyword-only in the protocol: a class may take them by position too


# ----------------------------------------------------------------------------- the worker's events

_CTL_SAMPLES: dict[str, dict[str, object]] = {
    "ready": {"python": "3.12.1", "torch": "2.5.0", "call_path": "compiled"},
    "setup_error": {"message": "ImportError: no module x", "detail": "Traceback ..."},
    "ok": {},
    "forked": {"job_id": 3, "pid": 4242},
    "exited": {"job_id": 3, "pid": 4242, "status": -9, "leftovers": 0},
}


def test_every_control_event_the_zygote_sends_arrives_as_the_same_named_event() -> None:
    import socket

    from pytest_maxcode.oracle.protocol import CTL_EVENTS, load_ctl
    from pytest_maxcode.oracle.remote._maxcode_worker import _send_ctl

    assert set(_CTL_SAMPLES) == set(CTL_EVENTS)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        for name, kwargs in _CTL_SAMPLES.items():
            _send_ctl(theirs, name, **kwargs)
            ev = load_ctl(ours.recv(1 << 16))
            assert (ev.name, ev.kwargs) == (name, kwargs)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"ready", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'["ready"]', "not a (name, {keywords}) event"),
        (b'{"name": "ok"}', "not a (name, {keywords}) event"),
        (b'["ok", {}, 1]', "not a (name, {keywords}) event"),
        (b'["ready", {"python": "3"}]', "keywords"),
        (b'["ok", {"extra": 1}]', "keywords"),
        (b'["forked", {"job_id": 1}]', "keywords"),
        (b'["forked", {"job_id": 1, "pid": 0}]', "pid is not valid"),  # killpg(0) would be our own group
        (b'["forked", {"job_id": 1, "pid": -1}]', "pid is not valid"),
        (b'["forked", {"job_id": 1, "pid": "7"}]', "pid is not valid"),
        (b'["exited", {"job_id": 1, "pid": 7, "status": 0, "leftovers": true}]', "leftovers is not valid"),
        (b'["dead", {"message": "forged"}]', "unknown event"),  # made by the parent, never read off the socket
        (b'["timeout", {}]', "unknown event"),
        (b'["outputs", {"workload": "w", "set": 0, "outputs": []}]', "unknown event"),  # a job's event, not a control one
    ],
)
def test_a_malformed_control_event_is_a_protocol_error_with_a_one_line_reason(data: bytes, why: str) -> None:
    from pytest_maxcode.oracle.protocol import ProtocolError, load_ctl

    with pytest.raises(ProtocolError) as caught:
        load_ctl(data)
    assert why in str(caught.value) and "\n" not in str(caught.value)


def _fake_zygote(tmp_path: Path, answer: bytes):
    """A Zygote whose control socket's other end is ours, with ``answer`` already waiting on it."""
    import socket

    from pytest_maxcode.oracle.pool import Zygote

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.send(answer)
    zygote = Zygote(reference={}, cwd=tmp_path)
    zygote.ctl = ours
    return zygote, theirs


def test_a_zygote_that_breaks_the_control_protocol_is_closed_with_the_reason(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.pool import WorkerSetupError

    zygote, theirs = _fake_zygote(tmp_path, b'["ready", {"python": "3"}]')
    with theirs, pytest.raises(WorkerSetupError, match="broke the control protocol: event 'ready' with keywords"):
        zygote.wait_ready(timeout=5)
    assert zygote.ctl is None


def test_a_setup_error_reaches_the_caller_as_its_message(tmp_path: Path) -> None:
    from pytest_maxcode.oracle.pool import WorkerSetupError

    zygote, theirs = _fake_zygote(tmp_path, b'["setup_error", {"message": "ImportError: x", "detail": "tb"}]')
    with theirs, pytest.raises(WorkerSetupError, match="^ImportError: x$"):
        zygote.wait_ready(timeout=5)


def test_a_forged_exit_ends_the_zygote_instead_of_being_believed(tmp_path: Path) -> None:
    zygote, theirs = _fake_zygote(tmp_path, b'["exited", {"job_id": 1, "pid": 7, "status": 0}]')
    with theirs:
        assert zygote._wait_exit(1, None, grace=5.0) == (None, 0)  # type: ignore[arg-type]
    assert zygote.ctl is None


# ----------------------------------------------------------------------------- the trusted side's commands


def test_every_command_to_the_zygote_arrives_named_with_its_keywords_and_descriptors(tmp_path: Path) -> None:
    import os
    import socket

    from pytest_maxcode.oracle.pool import Zygote
    from pytest_maxcode.oracle.remote._maxcode_worker import _recv_ctl

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = Zygote(reference={}, cwd=tmp_path)
    zygote.ctl = ours
    r, w = os.pipe()
    try:
        zygote._send("setup", reference={"path": "ref.py", "name": "Model"})
        assert _recv_ctl(theirs) == ("setup", {"reference": {"path": "ref.py", "name": "Model"}}, [])
        zygote._send("inputs", path="/tmp/x.pt")
        assert _recv_ctl(theirs) == ("inputs", {"path": "/tmp/x.pt"}, [])
        zygote._send("fork", fds=[w], job_id=2, job={"kind": "reference"})
        name, kwargs, fds = _recv_ctl(theirs)
        assert (name, kwargs, len(fds)) == ("fork", {"job_id": 2, "job": {"kind": "reference"}}, 1)
        os.write(fds[0], b"through")  # the descriptor travelled: the worker's copy writes into our pipe
        os.close(fds[0])
        assert os.read(r, 16) == b"through"
        zygote._send("exit")
        assert _recv_ctl(theirs) == ("exit", {}, [])
        ours.close()
        assert _recv_ctl(theirs) == ("exit", {}, [])  # a closed socket reads as exit
    finally:
        os.close(r)
        os.close(w)
        theirs.close()


def test_the_server_loop_reads_each_command_by_name_and_keyword() -> None:
    """The trusted side's commands, sent through a Job, drive the worker's real command loop;
    its answers come back as validated events."""
    import multiprocessing
    import threading
    import time

    from pytest_maxcode.oracle.pool import Job
    from pytest_maxcode.oracle.remote import _maxcode_worker as worker

    ours, theirs = multiprocessing.Pipe()
    job = Job(None, 1, 1, ours, None, time.monotonic() + 30, 1 << 20)  # type: ignore[arg-type]
    seen: list[tuple] = []

    class Stager:
        def run(self, workload: str, plan: list, first: int) -> bool:
            seen.append(("stage", workload, plan, first))
            return True

        def close(self) -> None:
            seen.append(("stager closed",))

    server = worker._Server(theirs, make_call=None, device="cpu", inplace=False)
    server._map = lambda layout, direct: seen.append(("map", layout, direct))  # type: ignore[method-assign]
    server._round = lambda n, rid: seen.append(("round", n, rid))  # type: ignore[method-assign]
    server.stager = Stager()  # type: ignore[assignment]
    loop = threading.Thread(target=server.serve)
    loop.start()
    job.send("map", layout={"slots": 2}, direct=True)
    assert job.expect("mapped").kwargs == {"pinned": False}  # page-locking is for a GPU's slots
    job.send("stage", workload="w", plan=[["fresh", 5]], first=4)
    assert job.expect("staged").kwargs == {"fresh": True}
    job.send("round", n=2, rid=7)
    job.send("flush")
    assert job.expect("flushed").kwargs == {}
    job.send("finish")
    loop.join(timeout=10)
    assert not loop.is_alive()
    assert seen == [("map", {"slots": 2}, True), ("stage", "w", [["fresh", 5]], 4), ("round", 2, 7), ("stager closed",)]


def test_a_side_whose_gpu_slots_were_not_page_locked_is_named_in_the_timing_notes() -> None:
    from pytest_maxcode.oracle.timing import _pinning_note

    assert _pinning_note(True, True) == [] and _pinning_note(False, False) == []
    assert _pinning_note(True, False) == ["the candidate's result slots could not be page-locked: its copy to the host "
                                          "is slower, so this speedup is understated"]
    assert "reference's" in _pinning_note(False, True)[0] and "overstated" in _pinning_note(False, True)[0]
