"""The oracle's device, decided in one function; the worker's job, sent whole by the parent;
verdict statuses set as enum members that serialise exactly as the strings did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_maxcode.errors import NO_CUDA_DEVICE, MaxcodeError
from pytest_maxcode.model.verdict import Verdict, VerdictStatus
from pytest_maxcode.oracle.check import INSTRUCTION_ROUNDS, SETTLE_S, CandidateSpec, CheckConfig, Oracle, resolve_device
from pytest_maxcode.oracle.remote import _maxcode_worker as worker


def _never() -> bool:
    raise AssertionError("a CPU run must not query the CUDA driver")


# ----------------------------------------------------------------------------- the device


@pytest.mark.parametrize(
    ("requested", "langs", "available", "expected"),
    [
        (None, (), None, "cpu"),
        (None, ("cpp", "py"), None, "cpu"),
        (None, ("cpp", "cuda"), None, "cuda"),  # asked for: what the sandbox and Ray's actors are sized for
        ("cpu", ("cuda",), None, "cpu"),
        ("cuda", (), None, "cuda"),
        (None, ("cuda",), True, "cuda"),
        (None, ("cuda",), False, "cpu"),  # implied by a .cu candidate: compiled, and reported on the CPU
        ("cuda", ("cpp",), True, "cuda"),
    ],
)
def test_the_device_is_the_one_asked_for_then_what_this_machine_can_run(
    requested: str | None, langs: tuple[str, ...], available: bool | None, expected: str
) -> None:
    cuda_available = None if available is None else (lambda: available)
    assert resolve_device(requested, langs, cuda_available=cuda_available) == expected


def test_cuda_asked_explicitly_on_a_machine_without_it_is_the_one_line_error() -> None:
    with pytest.raises(MaxcodeError) as caught:
        resolve_device("cuda", ("cuda",), cuda_available=lambda: False)
    assert str(caught.value) == NO_CUDA_DEVICE and "\n" not in str(caught.value)


def test_a_cpu_run_never_asks_whether_cuda_is_there() -> None:
    assert resolve_device("cpu", ("cuda",), cuda_available=_never) == "cpu"
    assert resolve_device(None, ("cpp",), cuda_available=_never) == "cpu"


def test_the_langs_may_be_a_one_shot_iterable() -> None:
    assert resolve_device(None, (lang for lang in ("py", "cuda"))) == "cuda"


# ----------------------------------------------------------------------------- the worker's job


def _bare_oracle(tmp_path: Path, timer: str = "time") -> Oracle:
    """An Oracle with only what building a candidate's job reads: no workers, no sandbox."""
    oracle = Oracle.__new__(Oracle)
    oracle.config = CheckConfig(device="cpu", timer=timer)
    oracle.device = "cpu"
    oracle.seed = 7
    oracle._slowdown = 1.0
    oracle.scratch = tmp_path
    oracle.cache_dir = tmp_path / "cache"
    oracle._compat_stage = None
    oracle._timer_job = {"timer": timer}
    return oracle


def test_the_parent_sends_every_key_the_worker_reads_from_a_candidate_job(tmp_path: Path) -> None:
    src = tmp_path / "k.cpp"
    src.write_text("// kernel\n")
    job = _bare_oracle(tmp_path)._job(CandidateSpec(src, "native", "cpp", src.read_text()), None)
    assert worker._protocol_error(job) is None
    assert job["settle_s"] == SETTLE_S and job["instruction_rounds"] == INSTRUCTION_ROUNDS
    json.dumps(job)  # it travels to the zygote as JSON


@pytest.mark.parametrize("key", ["settle_s", "instruction_rounds", "ranges", "timer", "inplace"])
def test_a_job_without_a_key_is_a_protocol_error_not_a_default(tmp_path: Path, key: str) -> None:
    src = tmp_path / "k.cpp"
    src.write_text("// kernel\n")
    job = _bare_oracle(tmp_path)._job(CandidateSpec(src, "native", "cpp", src.read_text()), None)
    del job[key]
    why = worker._protocol_error(job)
    assert why is not None and why.startswith("protocol error:") and key in why and "\n" not in why


def test_a_job_of_an_unknown_kind_is_a_protocol_error() -> None:
    why = worker._protocol_error({"kind": "candidat"})
    assert why is not None and "unknown kind 'candidat'" in why


def test_the_reference_jobs_name_what_their_readers_take() -> None:
    whole = {k: 0 for k in worker._JOB_KEYS["reference"]} | {"kind": "reference"}
    assert worker._protocol_error(whole) is None
    serve = {k: 0 for k in worker._JOB_KEYS["serve_reference"]} | {"kind": "serve_reference"}
    assert worker._protocol_error(serve) is None
    assert "range_seed" in (worker._protocol_error({k: v for k, v in whole.items() if k != "range_seed"}) or "")


# ----------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", [s for s in VerdictStatus if s is not VerdictStatus.FORMAT])
def test_a_status_set_as_a_member_serialises_exactly_as_the_string_did(status: VerdictStatus) -> None:
    by_member = Verdict("k.cpp", VerdictStatus.RUNTIME_ERROR, reasons=["r"], speedup=1.5)
    by_member.status = status
    by_string = Verdict("k.cpp", "runtime_error", reasons=["r"], speedup=1.5)
    by_string.status = status.value
    assert by_member.to_json() == by_string.to_json()
    assert json.dumps(by_member.to_json(), sort_keys=True) == json.dumps(by_string.to_json(), sort_keys=True)
    assert json.dumps(by_member.to_json()).count(f'"status": "{status.value}"') == 1
    assert type(by_member.to_json()["status"]) is str


def test_a_program_judges_failure_maps_to_a_member() -> None:
    from pytest_maxcode.oracle.program import _status

    assert [_status(f) for f in ("wrong output", "timed out", "killed by SIGSEGV", "output over 1 MiB", "exit 3")] == [
        VerdictStatus.WRONG, VerdictStatus.TIMEOUT, VerdictStatus.CRASH, VerdictStatus.REJECTED, VerdictStatus.RUNTIME_ERROR]
    assert all(isinstance(_status(f), VerdictStatus) for f in ("wrong output", "exit 3"))


def test_a_rejected_verdict_is_the_same_dict_as_before_the_enum() -> None:
    v = Verdict("k.cpp", VerdictStatus.RUNTIME_ERROR, reasons=["r"])
    v.status = VerdictStatus.REJECTED
    assert v.to_json() == {
        "candidate": "k.cpp", "status": "rejected", "speedup": None, "speedup_ci": None, "reference_s": None,
        "candidate_s": None, "compile_s": None, "eval_s": None, "weak_check": False, "reasons": ["r"],
        "diagnostics": {}, "hash": "", "format": "", "lang": "", "sandbox": "", "range_limited": None,
    }
