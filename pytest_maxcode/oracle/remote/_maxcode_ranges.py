"""Range sets: input sets beyond the captured range, so a kernel that is only right on
random-normal values at one scale (it clamps, overflows, flushes, drops NaN) is caught.

Runs inside the oracle's worker processes, so it imports nothing from the package: only the
standard library and torch.

From one captured input set, :func:`range_sets` makes labelled variants:

- ``x1e3``, ``x1e-3``: every continuous floating tensor scaled (clamped to the dtype's safe bound);
- ``shift``: moved away from zero by a multiple of its magnitude (cancellation: E[x^2] - E[x]^2);
- ``large``: scaled so its largest magnitude is near the top of the dtype's range
  (1e4 for fp16/bf16, 1e30 for fp32, 1e300 for fp64);
- ``special:zero``, ``special:denormal``, ``special:inf``, ``special:nan``, ``special:max``:
  the captured values with a sprinkling of that value (0 and -0.0; the smallest subnormals;
  +-inf; nan; the dtype's max and min) at seeded positions;
- ``int-edges``: continuous integer tensors with a sprinkling of their captured min, max and 0.

Discrete tensors (bools, and tensors with few distinct values that repeat: masks, labels, levels)
are left as captured, as are integer tensors outside ``int-edges`` (they index things), Python
scalars and anything that is not a tensor. A variant that changes nothing is not produced.

Which sets are used is the reference's to say (:func:`keep_set`); how outputs are compared on
them is :func:`special_equal`; the flag's text is :func:`describe`.
"""

from __future__ import annotations

import random

import torch

#: a tensor with at most this many distinct values, each repeated on average, is discrete
DISCRETE_VALUES = 16

SCALES = (("x1e3", 1e3), ("x1e-3", 1e-3))
SPECIALS = ("special:zero", "special:denormal", "special:inf", "special:nan", "special:max")
WIDENED = ("x1e3", "x1e-3", "shift", "large", "int-edges")
LABELS = WIDENED[:4] + SPECIALS + WIDENED[4:]

#: the largest magnitude a range set gives a dtype: near the top of its range, but with room
#: for a sum of a few such values before overflow
_LARGE = {"float16": 1e4, "bfloat16": 1e4, "float32": 1e30, "float64": 1e300}
#: how far ``shift`` moves a tensor, in multiples of its largest magnitude: far enough that a
#: one-pass variance (E[x^2] - E[x]^2) loses the dtype's tolerance, near enough that an honest
#: two-pass one summing in any order keeps it (fp32 layer norm over 1024: a sequential sum
#: passes at 10x and fails at 1000x; fp16/bf16 kernels accumulate in fp32)
_SHIFT = {"float16": 1e2, "bfloat16": 1e2, "float32": 1e1, "float64": 1e5}
#: at most this many positions per tensor get a special value (overflowing sums of several
#: max values depend on the order of summation; one per tensor does not)
_SPRINKLE_MAX = 16
#: values sampled before a full count of a tensor's distinct values
_SAMPLE = 4096


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _discrete(t) -> bool:
    """Few distinct values, each repeated on average: a mask, labels, levels, a constant."""
    if t.dtype == torch.bool:
        return True
    n = t.numel()
    if n == 0:
        return True
    flat = t.detach().reshape(-1)
    if flat.is_complex():  # torch has no unique for complex: the (real, imag) pairs instead
        flat = torch.view_as_real(flat)

    def distinct(values) -> int:
        return torch.unique(values, dim=0).size(0) if values.dim() > 1 else torch.unique(values).numel()

    # a spread sample with more distinct values than a discrete tensor has settles it without
    # sorting the whole tensor (seconds for 16M values; the range sets are made before any check)
    if n > _SAMPLE and distinct(flat[:: n // _SAMPLE]) > DISCRETE_VALUES:
        return False
    found = distinct(flat)
    return found <= DISCRETE_VALUES and found * 2 <= n


def _rng(seed: int, label: str, index: int) -> random.Random:
    return random.Random(f"maxcode-range:{seed}:{label}:{index}")


def _positions(n: int, count: int, rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(n), min(n, count)))


def _like(v, values):
    """``values`` (float64 or int64, ``v``'s shape) in ``v``'s dtype, strides and device."""
    out = torch.empty_like(v)  # a dense tensor keeps its strides (a transposed input stays transposed)
    out.copy_(values.reshape(v.shape))
    return out


def _sprinkled(v, positions: list[int], values: list):
    """A copy of ``v`` with ``values`` (cycled) at the row-major ``positions``: only those
    elements are written, in ``v``'s dtype as a conversion from float64 would give them."""
    out = v.detach().clone()
    if not positions:
        return out
    idx = torch.tensor(positions, dtype=torch.int64)
    new = torch.tensor([values[k % len(values)] for k in range(len(positions))], dtype=torch.float64 if
                       out.is_floating_point() else torch.int64).to(out.dtype)
    if out.is_contiguous():
        out.view(-1)[idx.to(out.device)] = new.to(out.device)
    else:
        out[tuple(i.to(out.device) for i in torch.unravel_index(idx, out.shape))] = new.to(out.device)
    return out


def _float_variant(v, label: str, seed: int, index: int):
    """One continuous floating tensor's values for ``label``, or None where it keeps its own."""
    if v.is_complex():
        if label not in ("x1e3", "x1e-3"):
            return None
        factor = dict(SCALES)[label]
        return _like(v, v.detach().to(torch.complex128) * factor)
    name = _dtype_name(v)
    if name not in _LARGE:
        return None
    if label.startswith("special:"):
        return _special(v, label, seed, index)
    bound = _LARGE[name]
    flat = v.detach().to(torch.float64).reshape(-1)  # every operation below makes a new tensor
    if label in ("x1e3", "x1e-3"):
        return _like(v, (flat * dict(SCALES)[label]).clamp_(-bound, bound))
    finite = torch.isfinite(flat)  # a mask, not a selection: selecting 16M values takes a second
    peak = float(torch.where(finite, flat.abs(), 0.0).max()) if flat.numel() else 0.0
    if label == "large":
        if peak == 0.0:
            return None
        return _like(v, (flat * (bound / peak)).clamp_(-bound, bound))
    if label == "shift":
        # away from zero, on the side the values already are (a positive-only input stays positive)
        negative = bool(((flat <= 0) | ~finite).all()) and bool(((flat < 0) & finite).any())
        offset = (peak or 1.0) * _SHIFT[name] * (-1.0 if negative else 1.0)
        return _like(v, (flat + offset).clamp_(-bound, bound))
    return None


def _special(v, label: str, seed: int, index: int):
    """The captured values with a sprinkling of ``label``'s special value at seeded positions."""
    info = torch.finfo(v.dtype)
    n = v.numel()
    rng = _rng(seed, label, index)
    if label == "special:max":
        # one per tensor: max and min in one sum cancel differently in each summation order
        values = [info.max if rng.random() < 0.5 else info.min]
        count = 1
    else:
        values = {
            "special:zero": [0.0, -0.0],
            "special:denormal": [info.tiny * info.eps, -info.tiny * info.eps, info.tiny / 2],
            "special:inf": [float("inf"), float("-inf")],
            "special:nan": [float("nan")],
        }[label]
        count = max(len(values), min(_SPRINKLE_MAX, n // 100))
    return _sprinkled(v, _positions(n, count, rng), values)


def _int_variant(v, seed: int, index: int):
    """A continuous integer tensor with a sprinkling of its captured min, max and 0."""
    lo, hi = int(v.min()), int(v.max())
    values = [lo, hi, 0]
    n = v.numel()
    count = max(len(values), min(_SPRINKLE_MAX, n // 100))
    return _sprinkled(v, _positions(n, count, _rng(seed, "int-edges", index)), values)


def range_sets(captured: list, seed: int) -> list[tuple[str, list]]:
    """Labelled input sets beyond ``captured``'s range, in :data:`LABELS` order; deterministic
    given ``seed``. ``captured`` is not modified; unchanged arguments are the captured objects."""
    kinds = []
    for v in captured:
        if not isinstance(v, torch.Tensor) or v.numel() == 0 or _discrete(v):
            kinds.append(None)
        elif v.is_floating_point() or v.is_complex():
            kinds.append("float")
        elif v.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            kinds.append("int")
        else:
            kinds.append(None)
    out = []
    for label in LABELS:
        values = list(captured)
        changed = False
        for i, (v, kind) in enumerate(zip(captured, kinds)):
            if kind == "float" and label != "int-edges":
                new = _float_variant(v, label, seed, i)
            elif kind == "int" and label == "int-edges":
                new = _int_variant(v, seed, i)
            else:
                new = None
            if new is not None and not _same(new, v):
                values[i] = new
                changed = True
        if changed:
            out.append((label, values))
    return out


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN (a variant that changes nothing is not a new set)."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def keep_set(label: str, captured_outputs: list, outputs: list) -> bool:
    """Whether a range set is used, given the reference's outputs on it (a set the reference
    raised on is never used). Special-value sets: always (NaN and inf in the outputs are the
    point). Widened sets: only where the reference stays finite wherever it was finite on the
    captured set, so the widened range is still inside what the reference computes."""
    if label.startswith("special:"):
        return True
    if len(captured_outputs) != len(outputs):
        return False
    for c, o in zip(captured_outputs, outputs):
        if not (isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex())):
            continue
        bad = ~torch.isfinite(o)
        if not bool(bad.any()):
            continue
        if not isinstance(c, torch.Tensor) or tuple(c.shape) != tuple(o.shape):
            return False
        if bool((bad & torch.isfinite(c)).any()):
            return False
    return True


def special_equal(expected, actual, atol: float, rtol: float) -> bool:
    """Outputs equal on a range set: same shape and dtype; integers exact; for floating values,
    NaN exactly where the expected has NaN, +inf exactly where it has +inf, -inf exactly where
    it has -inf, and elsewhere finite and within ``atol + rtol * |expected|`` (in float64).
    Complex values: the real and imaginary parts each by that rule. Signed zeros compare equal."""
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        return expected == actual
    if tuple(expected.shape) != tuple(actual.shape) or expected.dtype != actual.dtype:
        return False
    e, a = expected.detach().cpu(), actual.detach().cpu()
    if e.is_complex():
        return special_equal(e.real.contiguous(), a.real.contiguous(), atol, rtol) and \
            special_equal(e.imag.contiguous(), a.imag.contiguous(), atol, rtol)
    if not e.is_floating_point():
        return bool(torch.equal(e, a))
    e, a = e.to(torch.float64), a.to(torch.float64)
    e_nan, a_nan = torch.isnan(e), torch.isnan(a)
    if not bool(torch.equal(e_nan, a_nan)):
        return False
    for sign in (float("inf"), float("-inf")):
        if not bool(torch.equal(e == sign, a == sign)):
            return False
    finite = torch.isfinite(e)
    if not bool(torch.isfinite(a[finite]).all()):
        return False
    ef, af = e[finite], a[finite]
    return bool(((ef - af).abs() <= atol + rtol * ef.abs()).all())


def describe(passed: list[str], failed: list[str]) -> str:
    """The flag's text: ``passed: captured range, x1e-3; failed: x1e3, special:nan``."""
    ok = ["captured range"] + [p for p in passed if p != "captured range"]
    return f"passed: {', '.join(ok)}; failed: {', '.join(failed) if failed else 'none'}"
