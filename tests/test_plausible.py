"""Plausibility: calls faster than the machine's roofs, and instruction counts that wall time
does not bear out, are rejected with the figures; honest results at the margins are not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maxcode.model.verdict import Verdict
from pytest_maxcode.oracle import probe
from pytest_maxcode.oracle.check import counts_against_wall
from pytest_maxcode.oracle.plausible import (
    INSTRUCTIONS_MARGIN,
    MEMORY_BOUND_FRACTION,
    MEMORY_BOUND_INSTRUCTIONS_MARGIN,
    ROOF_MARGIN,
    instructions_vs_wall,
    roof_violation,
)

GB = 10**9
MiB = 1 << 20
CACHE = 32 * MiB
BW = 20e9  # a measured DRAM roof, bytes/s
FLOPS = 100e9


def _roof(bytes_per_call: int = 0, flops_per_call: int = 0, seconds: float = 1e-3, **kw: object) -> str | None:
    args: dict[str, object] = {"bandwidth_Bps": BW, "flops_per_s": FLOPS, "cache_bytes": CACHE}
    args.update(kw)
    return roof_violation(bytes_per_call=bytes_per_call, flops_per_call=flops_per_call, seconds_per_call=seconds, **args)


def test_data_that_fits_in_cache_never_trips_the_roof() -> None:
    assert _roof(bytes_per_call=2 * CACHE, seconds=1e-9) is None


def test_memory_roof_boundary_is_the_margin_over_bytes_beyond_the_cache() -> None:
    dram = 10 * GB
    total = dram + 2 * CACHE
    at_margin = dram / (ROOF_MARGIN * BW)
    assert _roof(bytes_per_call=total, seconds=at_margin) is None
    reason = _roof(bytes_per_call=total, seconds=at_margin * 0.99)
    assert reason is not None and "memory roof" in reason and "20 GB/s" in reason and "4.04x" in reason
    assert "the limit is 4x" in reason


def test_a_call_that_would_need_dram_at_many_times_the_roof_is_rejected_with_the_figures() -> None:
    reason = _roof(bytes_per_call=1 << 30, seconds=1e-3)
    assert reason is not None
    assert reason.startswith("1.01 TB/s of memory traffic needed, 50.3x this machine's measured 20 GB/s memory roof")


def test_compute_roof_boundary() -> None:
    at_margin = 10**9 / (ROOF_MARGIN * FLOPS)
    assert _roof(flops_per_call=10**9, seconds=at_margin) is None
    reason = _roof(flops_per_call=10**9, seconds=at_margin / 2)
    assert reason is not None and "8x this machine's measured 100 GFLOP/s compute roof" in reason


def test_unknown_roofs_and_zero_work_are_not_checked() -> None:
    assert _roof(bytes_per_call=1 << 40, flops_per_call=10**15, seconds=1e-9, bandwidth_Bps=None, flops_per_s=None) is None
    assert _roof(bytes_per_call=0, flops_per_call=0, seconds=1e-9) is None


def test_a_call_that_took_no_time_is_rejected_when_it_had_work_to_do() -> None:
    reason = _roof(bytes_per_call=1 << 30, seconds=0.0)
    assert reason is not None and reason.startswith("a call took 0 s")
    assert _roof(bytes_per_call=MiB, seconds=0.0) is None  # in cache, no FLOPs: nothing says it is impossible


@pytest.mark.parametrize(
    "kw",
    [{"bytes_per_call": -1}, {"seconds": float("nan")}, {"margin": 1.0}],
)
def test_bad_roof_arguments_are_one_line_errors(kw: dict) -> None:
    with pytest.raises(ValueError, match="roof_violation: needs"):
        _roof(**kw)


def test_default_cache_is_this_machines() -> None:
    size = probe.cache_bytes("cpu")
    assert size > 0
    total = 2 * size + 10 * GB
    assert roof_violation(
        bytes_per_call=total, flops_per_call=0, seconds_per_call=1e-6, bandwidth_Bps=BW, flops_per_s=None
    ) == _roof(bytes_per_call=total, seconds=1e-6, cache_bytes=size)


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> None:
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (d / name).write_text(f"{value}\n")


def test_cache_size_sums_every_data_cache_instance_once(tmp_path: Path) -> None:
    for cpu in (0, 1):
        _cache(tmp_path, cpu, 0, 1, "Data", "48K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "1024K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32M", "0-1")  # one L3 shared by both
    assert probe.cache_bytes("cpu", root=str(tmp_path)) == 2 * (48 << 10) + 2 * (1 << 20) + (32 << 20)


def test_unreadable_cache_sizes_fall_back_to_a_generous_figure(tmp_path: Path) -> None:
    assert probe.cache_bytes("cpu", root=str(tmp_path)) == probe.UNKNOWN_CACHE_BYTES


def test_instructions_far_beyond_wall_time_are_rejected_for_compute_bound_kernels() -> None:
    reason = instructions_vs_wall(5.0, 0.9, 1.05, bandwidth_fraction=0.1)
    assert reason is not None and reason.startswith("instructions say 5x faster but wall time says 0.9x-1.05x")
    assert f"beyond the {INSTRUCTIONS_MARGIN:g}x" in reason


def test_the_compute_bound_margin_is_inclusive() -> None:
    assert instructions_vs_wall(INSTRUCTIONS_MARGIN * 2.0, 1.5, 2.0, bandwidth_fraction=0.0) is None
    assert instructions_vs_wall(INSTRUCTIONS_MARGIN * 2.0 * 1.01, 1.5, 2.0, bandwidth_fraction=0.0) is not None


def test_honest_measurements_from_the_docstring_pass() -> None:
    assert instructions_vs_wall(16.6, 7.9, 8.3, bandwidth_fraction=0.17) is None  # vectorized compute
    assert instructions_vs_wall(16.6, 1.1, 1.17, bandwidth_fraction=1.67) is None  # vectorized, from DRAM
    assert instructions_vs_wall(7.0, 0.55, 0.59, bandwidth_fraction=0.87) is None  # AVX2 gather


def test_memory_bound_kernels_get_the_wide_margin_but_a_switched_off_count_is_still_caught() -> None:
    wall = (0.95, 1.05)
    assert instructions_vs_wall(60.0, *wall, bandwidth_fraction=MEMORY_BOUND_FRACTION) is None
    assert instructions_vs_wall(60.0, *wall, bandwidth_fraction=MEMORY_BOUND_FRACTION * 0.99) is not None
    reason = instructions_vs_wall(1000.0, *wall, bandwidth_fraction=2.0)
    assert reason is not None and f"beyond the {MEMORY_BOUND_INSTRUCTIONS_MARGIN:g}x an honest memory-bound kernel" in reason
    assert instructions_vs_wall(1000.0, *wall) == reason  # unknown bandwidth: the lenient margin


def test_no_instruction_claim_is_never_rejected() -> None:
    assert instructions_vs_wall(1.0, 0.01, 0.02, bandwidth_fraction=0.0) is None
    assert instructions_vs_wall(0.5, 0.01, 0.02, bandwidth_fraction=0.0) is None


@pytest.mark.parametrize("args", [(2.0, 0.0, 1.0), (2.0, 1.2, 1.1), (0.0, 1.0, 1.0)])
def test_bad_speedups_are_one_line_errors(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="instructions_vs_wall: needs"):
        instructions_vs_wall(*args)


def _counted(speedup: float) -> Verdict:
    v = Verdict("k.cpp", "faster", speedup=speedup, speedup_ci=[speedup * 0.99, speedup * 1.01])
    v.reasons = [f"{speedup:.3g}x fewer instructions clears the bar"]
    return v


def _walled(speedup: float, low: float, high: float, status: str = "not_faster") -> Verdict:
    return Verdict("k.cpp", status, speedup=speedup, speedup_ci=[low, high])


@pytest.mark.parametrize("counted, wall, expected", [
    # the trusted clock is sure the bar is not cleared: counts from the candidate's process do not overrule it
    (3.0, (1.0, 0.97, 1.03), "not_faster"),
    (3.0, (0.6, 0.55, 0.66), "not_faster"),
    # a wide interval on a loaded machine is no such certainty: the counts keep their determinism
    (3.0, (1.0, 0.7, 1.4), "faster"),
    (3.0, (2.5, 2.2, 2.9, "faster"), "faster"),
    # further apart than instructions per cycle can explain, whatever the memory traffic
    (100.0, (1.0, 0.97, 1.03), "rejected"),
])
def test_the_trusted_wall_clock_has_the_last_word_over_instruction_counts(counted: float, wall: tuple, expected: str) -> None:
    v = counts_against_wall(_counted(counted), _walled(*wall), 1.05)
    assert v.status == expected, v.reasons
    assert v.diagnostics["wall"]["speedup_ci"] == [wall[1], wall[2]]
    if expected == "not_faster":
        assert "below the bar of 1.05x" in v.reasons[0] and f"{wall[0]:.3g}x" in v.reasons[0], v.reasons


COUNT_FLOPS = """
import sys, torch
from pytest_maxcode.oracle.remote._maxcode_worker import _count_flops
x, w = torch.randn(64, 128), torch.randn(128, 32)
print(_count_flops(lambda a, b: torch.relu(a @ b) * 2, [x, w], "cpu"), _count_flops(lambda a, b: a + 1, [x, w], "cpu"),
      "torch._dynamo" in sys.modules)
"""


def test_the_reference_flop_count_is_torchs_and_does_not_load_dynamo() -> None:
    """The compute roof's FLOPs come from torch's counter; its dispatch wrapper would import
    Dynamo (1.2 s on every oracle's start) for a reference that compiles nothing."""
    out = subprocess.run([sys.executable, "-c", COUNT_FLOPS], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == [str(2 * 64 * 128 * 32), "0", "False"], out


COUNT_LAZY = """
import torch
from pytest_maxcode.oracle.remote._maxcode_worker import _count_flops
compiled = []


def reference(a, b):  # compiles on its first call: Dynamo loads while the counter is on
    if not compiled:
        compiled.append(torch.compile(lambda x, y: torch.relu(x @ y), backend="eager"))
    return compiled[0](a, b)


x, w = torch.randn(64, 128), torch.randn(128, 32)
print(_count_flops(reference, [x, w], "cpu"), _count_flops(reference, [x, w], "cpu"))
"""


def test_a_reference_that_compiles_inside_its_first_call_is_still_counted() -> None:
    """The counter's plain wrapper stays right when the reference itself loads Dynamo mid-count."""
    out = subprocess.run([sys.executable, "-c", COUNT_LAZY], capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.split() == [str(2 * 64 * 128 * 32)] * 2, out


def test_the_vector_isa_answer_is_read_from_the_machine_cache(tmp_path: Path) -> None:
    """Once measured, the answer is read back: a worker is told what the cache says."""
    for answer in (False, True):
        path = probe.vector_isa_path(tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"vec_isa_ok": {str(answer).lower()}}}')
        assert probe.vector_isa_ok(tmp_path) is answer


def test_a_vector_isa_probe_that_fails_says_none_and_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that cannot run leaves the question to each worker's own probe, and is asked again next time."""
    monkeypatch.setattr(probe, "_VEC_ISA_PROBE", "raise SystemExit(3)")
    assert probe.vector_isa_ok(tmp_path) is None
    monkeypatch.setattr(probe, "_VEC_ISA_PROBE", "print('not json')")
    assert probe.vector_isa_ok(tmp_path) is None
    assert not probe.vector_isa_path(tmp_path).exists()


def test_a_new_compiler_is_a_new_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer is the compiler's as much as the CPU's: another ``$CXX`` is looked up afresh."""
    compiler = tmp_path / "bin" / "g++"
    compiler.parent.mkdir()
    compiler.write_text("#!/bin/sh\nexit 1\n")
    compiler.chmod(0o755)
    before = probe.vector_isa_path(tmp_path)
    monkeypatch.setenv("CXX", str(compiler))
    assert probe.vector_isa_path(tmp_path) != before


def test_a_cache_folder_that_cannot_be_written_costs_a_measurement_not_the_run() -> None:
    """``$MAXCODE_CACHE_DIR`` pointing somewhere unwritable: the figure is measured and used, only not kept."""
    nowhere = Path("/proc/maxcode-cannot-write-here")
    assert probe._cached(nowhere, "cpu", "bytes_per_s", lambda device: 1.5e10)["bytes_per_s"] == 1.5e10
    assert not nowhere.exists()
