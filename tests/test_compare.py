"""Correctness checks: tolerances by dtype, mismatch summaries, weak checks."""

from __future__ import annotations

import pytest
import torch

from pytest_maxcode.oracle.compare import compare, tolerances, weak_reasons


def test_default_tolerances_by_dtype() -> None:
    assert tolerances(torch.float32, None, None) == (1e-4, 1e-4)
    assert tolerances(torch.float16, None, None) == (1e-2, 1e-2)
    assert tolerances(torch.bfloat16, None, None) == (1e-2, 1e-2)
    assert tolerances(torch.int32, None, None) == (0.0, 0.0)
    assert tolerances(torch.float32, 0.5, None) == (0.5, 1e-4)


def test_within_tolerance_passes_and_outside_fails() -> None:
    e = torch.ones(100)
    assert compare([e], [e + 5e-5], None, None) is None
    m = compare([e], [e + torch.where(torch.arange(100) == 42, 1e-2, 0.0)], None, None)
    assert m is not None
    assert m.details["first_bad_index"] == [42]
    assert m.details["n_wrong"] == 1
    assert abs(m.details["max_abs_error"] - 1e-2) < 1e-6


def test_half_precision_uses_its_own_tolerance() -> None:
    e = torch.ones(10, dtype=torch.float16)
    assert compare([e], [e + 0.005], None, None) is None
    assert compare([e], [e + 0.05], None, None) is not None


def test_shape_dtype_and_count_mismatches() -> None:
    e = torch.ones(4)
    assert "shape" in compare([e], [torch.ones(2, 2)], None, None).reason
    assert "dtype" in compare([e], [torch.ones(4, dtype=torch.float64)], None, None).reason
    assert "outputs" in compare([e], [e, e], None, None).reason


def test_nan_where_a_number_is_expected_is_wrong() -> None:
    e = torch.zeros(3)
    got = e.clone()
    got[1] = float("nan")
    m = compare([e], [got], None, None)
    assert m is not None and m.details["n_nan"] == 1


def test_integers_are_exact() -> None:
    e = torch.arange(5)
    assert compare([e], [e.clone()], None, None) is None
    assert compare([e], [e + 1], None, None) is not None


def test_weak_check_flags_tiny_constant_and_input_independent_outputs() -> None:
    strong = [[torch.randn(100)], [torch.randn(100)]]
    assert weak_reasons(strong, None, None) == []
    tiny = [[torch.randn(100) * 1e-6], [torch.randn(100) * 1e-6]]
    assert any("all-zeros" in r for r in weak_reasons(tiny, None, None))
    const = [[torch.full((100,), 3.0) + torch.randn(100) * 1e-7], [torch.full((100,), 3.0)]]
    assert any("constant" in r for r in weak_reasons(const, None, None))
    fixed = torch.randn(100)
    same = [[fixed.clone()], [fixed.clone()]]
    assert any("does not change" in r for r in weak_reasons(same, None, None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_the_fast_path_decides_as_isclose_does(dtype: torch.dtype) -> None:
    # values at the edge of the tolerance, NaNs and infinities on either side: the three-pass
    # check may only say "close" where torch.isclose does
    from pytest_maxcode.oracle.compare import _all_close

    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        e = torch.randn(64, generator=gen).to(dtype)
        scale = [0.0, 5e-5, 1e-4, 2e-4, 1e-2][trial % 5]
        g = e + (scale * torch.randn(64, generator=gen)).to(dtype)
        if trial % 7 == 0:
            g[trial % 64] = float("nan")
        if trial % 11 == 0:
            e[3] = g[3] = float("inf")
        if trial % 13 == 0:
            e[5] = float("nan")
            g[5] = float("nan")
        for atol, rtol in ((1e-4, 1e-4), (0.0, 1e-3), (1e-2, 0.0)):
            want = bool(torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True).all())
            assert _all_close(e, g, atol, rtol) == want, (trial, atol, rtol)
