"""Correctness: dtype-aware tolerances, mismatch summaries, and the weak-check test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

# Defaults by dtype, as current KernelBench: exact for integers and bools.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}


def tolerances(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    d_atol, d_rtol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return (d_atol if atol is None else atol, d_rtol if rtol is None else rtol)


def _all_close(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> bool:
    """The fast path, in the tensors' own dtype; details are computed only on failure.

    ``|got - expected| <= atol + rtol * |expected|`` in three passes, the arithmetic of
    ``torch.isclose`` without its passes for NaN and infinity (five times faster on a CPU): a NaN
    or an infinity on either side fails it, and ``isclose`` then decides as before.
    """
    if not (expected.is_floating_point() or expected.is_complex()):
        return bool(torch.equal(expected, got))
    if expected.dtype in (torch.float32, torch.float64):
        error = (got - expected).abs_()
        allowed = expected.abs().mul_(rtol).add_(atol)
        if bool((error <= allowed).all()):
            return True
    return bool(torch.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def _close(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    if not (expected.is_floating_point() or expected.is_complex()):
        return expected == got
    e = expected.to(torch.complex128 if expected.is_complex() else torch.float64)
    g = got.to(e.dtype)
    ok = (e - g).abs() <= atol + rtol * e.abs()
    both_nan = torch.isnan(e) & torch.isnan(g) if not e.is_complex() else torch.zeros_like(ok)
    both_inf = torch.isinf(e) & (e == g) if not e.is_complex() else torch.zeros_like(ok)
    return ok | both_nan | both_inf


@dataclass
class Mismatch:
    output: int
    reason: str
    details: dict[str, Any]

    def line(self) -> str:
        return f"output {self.output}: {self.reason}"


def compare(expected: Sequence[torch.Tensor], got: Sequence[torch.Tensor], atol: float | None, rtol: float | None) -> Mismatch | None:
    """The first output of ``got`` that differs from ``expected``, or None.

    ``got`` came from the sandbox: the protocol has checked that each is a plain tensor, but
    whatever comparing one still raises is that output's mismatch, never the trusted side's crash.
    """
    if len(expected) != len(got):
        return Mismatch(-1, f"{len(got)} outputs, expected {len(expected)}", {})
    for i, (e, g) in enumerate(zip(expected, got)):
        try:
            mismatch = _compare_one(i, e, g, atol, rtol)
        except Exception as x:  # noqa: BLE001 - any failure to compare is the candidate's output at fault
            why = (str(x).splitlines() or [""])[0][:200]
            return Mismatch(i, f"could not be compared with the reference's ({type(x).__name__}: {why})", {})
        if mismatch is not None:
            return mismatch
    return None


def _compare_one(i: int, e: torch.Tensor, g: torch.Tensor, atol: float | None, rtol: float | None) -> Mismatch | None:
    """Output ``i``'s mismatch, or None; it may raise on a tensor torch cannot compare (``compare`` catches that)."""
    if not isinstance(g, torch.Tensor):
        return Mismatch(i, f"a {type(g).__name__}, expected a tensor", {})
    if tuple(e.shape) != tuple(g.shape):
        return Mismatch(i, f"shape {tuple(g.shape)}, expected {tuple(e.shape)}", {})
    if e.dtype != g.dtype:
        return Mismatch(i, f"dtype {g.dtype}, expected {e.dtype}", {})
    if (g.device, g.layout, g.is_nested) != (e.device, e.layout, e.is_nested):
        return Mismatch(i, f"a {g.layout} tensor on {g.device}, expected a {e.layout} tensor on {e.device}", {})
    a, r = tolerances(e.dtype, atol, rtol)
    if _all_close(e, g, a, r):
        return None
    ok = _close(e, g, a, r)
    if bool(ok.all()):
        return None
    bad = ~ok
    n_bad = int(bad.sum())
    first = int(bad.flatten().nonzero()[0])
    index = list(_unravel(first, tuple(e.shape)))
    ef = e.flatten()[first].item()
    gf = g.flatten()[first].item()
    details: dict[str, Any] = {
        "atol": a,
        "rtol": r,
        "fraction_wrong": n_bad / max(1, e.numel()),
        "n_wrong": n_bad,
        "first_bad_index": index,
        "expected": _num(ef),
        "got": _num(gf),
    }
    if e.is_floating_point():
        diff = (e.double() - g.double()).abs()
        finite = torch.isfinite(diff)
        details["n_nan"] = int(torch.isnan(g).sum())
        details["max_abs_error"] = float(diff[finite].max()) if bool(finite.any()) else float("inf")
        rel = diff / e.double().abs().clamp_min(1e-12)
        details["max_rel_error"] = float(rel[finite].max()) if bool(finite.any()) else float("inf")
    reason = (
        f"{n_bad}/{e.numel()} elements wrong ({100 * n_bad / max(1, e.numel()):.3g}%), "
        f"first at {index}: got {_num(gf)}, expected {_num(ef)}"
    )
    return Mismatch(i, reason, details)


def _num(v: Any) -> Any:
    if isinstance(v, complex):
        return [v.real, v.imag]
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return str(v)
    return v


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(out))


def weak_reasons(expected_sets: Sequence[Sequence[torch.Tensor]], atol: float | None, rtol: float | None) -> list[str]:
    """Why a no-op candidate could pass this check, if it could.

    An all-zeros or constant-fill output passing the tolerance test, or outputs that do
    not change when the inputs do, make "correct" meaningless for this workload.
    """
    reasons: list[str] = []
    for i, e in enumerate(expected_sets[0]):
        if e.numel() == 0:
            reasons.append(f"output {i} is empty")
            continue
        a, r = tolerances(e.dtype, atol, rtol)
        if _all_close(e, torch.zeros_like(e), a, r):
            reasons.append(f"output {i}: an all-zeros output passes the tolerance check")
            continue
        if e.is_floating_point():
            fill = torch.full_like(e, float(e.double().mean()))
            if _all_close(e, fill, a, r):
                reasons.append(f"output {i}: a constant output passes the tolerance check")
                continue
    if len(expected_sets) >= 2:
        for i in range(len(expected_sets[0])):
            first = expected_sets[0][i]
            a, r = tolerances(first.dtype, atol, rtol)
            if all(s[i].shape == first.shape and _all_close(first, s[i], a, r) for s in expected_sets[1:]):
                reasons.append(f"output {i} does not change with the inputs across seeds")
    return reasons
