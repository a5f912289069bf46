"""Range: input sets beyond the captured range, the ``range_limited`` flag, and its gate.

A kernel right only on random-normal values at one scale (it clamps, overflows, drops NaN) is
flagged; such a result is reported, but not applied and not proposed unless the target sets
``accept_range_limited``."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import github_fake
import pytest
import torch
from github_fake import FAKE_GH_TOKEN
from rich.console import Console
from test_report import sample_report

from pytest_maxcode.model.candidate import candidate_hash
from pytest_maxcode.apply import apply_report, apply_target
from pytest_maxcode.bot.pr import why_not
from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.options import accepts_range_limited, load_settings
from pytest_maxcode.oracle.remote._maxcode_ranges import (
    LABELS,
    describe,
    keep_set,
    range_sets,
    special_equal,
)
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.report import render_html, render_markdown, render_terminal
from pytest_maxcode.report._format import fmt_verdict
from pytest_maxcode.targets import decorator
from pytest_maxcode.targets.accept import accept
from pytest_maxcode.targets.lock import read_lock

fake_github = github_fake.fake_github
FLAG = "passed: captured range, x1e-3, shift; failed: x1e3, special:nan"


def captured() -> list[Any]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 30, generator=g)  # continuous fp32
    h = torch.randn(30, 20, generator=g).to(torch.float16).t()  # continuous fp16, transposed
    mask = torch.rand(40, generator=g) > 0.5  # bool
    levels = (torch.rand(40, 30, generator=g) > 0.5).float()  # a mask stored as floats: discrete
    labels = torch.randint(0, 5, (200,), generator=g)  # few distinct values: labels
    ids = torch.randperm(500, generator=g) + 3  # continuous integers
    return [x, h, mask, levels, labels, ids, 0.5, "mean"]


def by_label(sets: list[tuple[str, list]]) -> dict[str, list]:
    return dict(sets)


# -- range_sets -----------------------------------------------------------------------------------


def test_every_label_appears_once_in_order_and_is_short() -> None:
    sets = range_sets(captured(), seed=0)
    labels = [label for label, _ in sets]
    assert labels == list(LABELS)
    assert all(len(label) <= 16 and " " not in label for label in labels)


def test_dtypes_shapes_and_strides_are_kept_and_the_captured_set_is_untouched() -> None:
    cap = captured()
    before = [v.clone() if isinstance(v, torch.Tensor) else v for v in cap]
    for label, values in range_sets(cap, seed=3):
        assert len(values) == len(cap), label
        for new, old in zip(values, cap):
            if isinstance(old, torch.Tensor):
                assert (new.dtype, tuple(new.shape), new.stride()) == (old.dtype, tuple(old.shape), old.stride()), label
    for now, was in zip(cap, before):
        if isinstance(was, torch.Tensor):
            assert torch.equal(now, was)


def test_discrete_tensors_indices_and_scalars_are_left_as_captured() -> None:
    cap = captured()
    for label, values in range_sets(cap, seed=0):
        for i in (2, 3, 4, 6, 7):  # bool mask, float levels, labels, Python scalars
            assert values[i] is cap[i], (label, i)
        if label != "int-edges":
            assert values[5] is cap[5], label  # integers index things: only int-edges moves them
        else:
            assert values[0] is cap[0] and values[1] is cap[1]


def test_only_discrete_inputs_give_no_range_sets() -> None:
    assert range_sets([torch.tensor([0.0, 1.0] * 50), torch.zeros(10, dtype=torch.bool), 3], seed=0) == []


def test_complex_inputs_are_scaled_and_discrete_ones_left_as_captured() -> None:
    # torch has no unique for complex tensors: before the (real, imag) pairs, a complex input
    # ended the reference job
    wave, levels = torch.randn(8, 8, dtype=torch.complex64), torch.tensor([1 + 1j, 2j] * 10)
    sets = dict(range_sets([wave, levels], seed=0))
    assert sorted(sets) == ["x1e-3", "x1e3"]
    assert torch.allclose(sets["x1e3"][0], wave * 1e3) and sets["x1e3"][1] is levels


def test_a_large_spread_tensor_is_continuous_and_a_large_mask_discrete() -> None:
    # past the sample the full count decides: few distinct values far apart are still levels
    levels = torch.tensor([0.0, 0.5, 1.0]).repeat(10_000)
    spread = torch.randn(20_000)
    for label, values in range_sets([levels, spread], seed=0):
        assert values[0] is levels, label
    assert len(range_sets([levels, spread], seed=0)) == len(LABELS) - 1  # every label but int-edges


def test_deterministic_given_the_seed() -> None:
    def bits(sets: list[tuple[str, list]]) -> list[tuple[str, list[bytes]]]:
        return [(label, [v.contiguous().view(torch.uint8).numpy().tobytes() for v in values if isinstance(v, torch.Tensor)])
                for label, values in sets]

    assert bits(range_sets(captured(), seed=7)) == bits(range_sets(captured(), seed=7))
    assert by_label(bits(range_sets(captured(), seed=7)))["special:nan"] != by_label(bits(range_sets(captured(), seed=8)))["special:nan"]


def test_special_sets_hold_their_values() -> None:
    sets = by_label(range_sets(captured(), seed=0))
    for i in (0, 1):  # the fp32 and the fp16 tensor
        x0 = captured()[i]
        info = torch.finfo(x0.dtype)
        inf = sets["special:inf"][i]
        assert bool((inf == math.inf).any()) and bool((inf == -math.inf).any()), i
        assert bool(torch.isnan(sets["special:nan"][i]).any()), i
        assert not bool(torch.isnan(sets["special:inf"][i]).any()), i
        top = sets["special:max"][i].abs().max()
        assert float(top) == info.max, i
        zero = sets["special:zero"][i]
        assert bool((zero == 0).any()) and bool(torch.signbit(zero[zero == 0]).any()), i  # a -0.0 among them
        tiny = sets["special:denormal"][i].abs()
        assert bool(((tiny > 0) & (tiny < info.tiny)).any()), i
        # the rest is the captured values: a sprinkling, not a new tensor
        same = (sets["special:nan"][i] == x0).float().mean()
        assert float(same) > 0.9, i


def test_widened_sets_stay_finite_and_inside_the_dtype() -> None:
    cap = captured()
    sets = by_label(range_sets(cap, seed=0))
    x = cap[0]
    assert torch.allclose(sets["x1e3"][0], x * 1e3) and torch.allclose(sets["x1e-3"][0], x * 1e-3)
    big32, big16 = sets["large"][0].abs().max(), sets["large"][1].float().abs().max()
    assert 1e29 < float(big32) <= 1.0001e30 and 5e3 < float(big16) <= 1e4
    for label in ("x1e3", "x1e-3", "shift", "large"):
        assert all(bool(torch.isfinite(v).all()) for v in sets[label][:2]), label
    assert float(sets["shift"][0].mean()) > 5 * float(x.abs().max())  # moved away from zero, not just scaled


def test_shift_catches_a_one_pass_variance_and_passes_an_honest_sequential_sum() -> None:
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(0))
    shifted = by_label(range_sets([x], seed=0))["shift"][0]

    def sequential_two_pass(x: torch.Tensor) -> torch.Tensor:
        m = x.cumsum(-1)[:, -1:] / x.shape[-1]
        d = x - m
        return d / torch.sqrt((d * d).cumsum(-1)[:, -1:] / x.shape[-1] + 1e-5)

    def one_pass(x: torch.Tensor) -> torch.Tensor:
        m = x.mean(-1, keepdim=True)
        return (x - m) / torch.sqrt((x * x).mean(-1, keepdim=True) - m * m + 1e-5)

    expected = torch.nn.functional.layer_norm(shifted, (1024,))
    assert special_equal(expected, sequential_two_pass(shifted), 1e-4, 1e-4)
    assert not special_equal(expected, one_pass(shifted), 1e-4, 1e-4)
    assert special_equal(torch.nn.functional.layer_norm(x, (1024,)), one_pass(x), 1e-4, 1e-4)  # fine on the captured range


def test_shift_keeps_a_positive_input_positive() -> None:
    x = torch.rand(100) + 0.1
    shifted = by_label(range_sets([x], seed=0))["shift"][0]
    assert bool((shifted > 0).all())


def test_int_edges_put_the_captured_min_max_and_zero_in_place() -> None:
    cap = captured()
    ids = by_label(range_sets(cap, seed=0))["int-edges"][5]
    lo, hi = int(cap[5].min()), int(cap[5].max())
    assert {lo, hi, 0} <= set(ids.tolist())
    assert int(ids.min()) >= min(lo, 0) and int(ids.max()) <= hi


# -- keep_set, special_equal, describe ------------------------------------------------------------


def test_a_widened_set_the_reference_overflows_on_is_not_used() -> None:
    ref = [torch.ones(4)]
    assert keep_set("x1e3", ref, [torch.full((4,), 5.0)])
    assert not keep_set("x1e3", ref, [torch.tensor([1.0, math.inf, 1.0, 1.0])])
    assert keep_set("x1e3", [torch.tensor([1.0, math.nan])], [torch.tensor([2.0, math.nan])])  # NaN where it was NaN
    assert keep_set("special:nan", ref, [torch.full((4,), math.nan)])  # NaN out is the point of a special set


def test_special_equal_wants_nan_and_inf_at_the_same_places() -> None:
    e = torch.tensor([1.0, math.nan, math.inf, -math.inf, 0.0])
    assert special_equal(e, e.clone(), 1e-4, 1e-4)
    assert special_equal(e, torch.tensor([1.00001, math.nan, math.inf, -math.inf, -0.0]), 1e-4, 1e-4)
    assert not special_equal(e, torch.tensor([1.0, 0.0, math.inf, -math.inf, 0.0]), 1e-4, 1e-4)  # NaN dropped
    assert not special_equal(e, torch.tensor([math.nan, math.nan, math.inf, -math.inf, 0.0]), 1e-4, 1e-4)  # NaN made up
    assert not special_equal(e, torch.tensor([1.0, math.nan, -math.inf, -math.inf, 0.0]), 1e-4, 1e-4)  # inf's sign
    assert not special_equal(e, torch.tensor([1.0, math.nan, 3e38, -math.inf, 0.0]), 1e-4, 1e-4)  # clamped inf
    assert not special_equal(e, torch.tensor([1.1, math.nan, math.inf, -math.inf, 0.0]), 1e-4, 1e-4)
    assert not special_equal(e, e.double(), 1e-4, 1e-4) and not special_equal(e, e[:4], 1e-4, 1e-4)
    assert special_equal(torch.arange(5), torch.arange(5), 0, 0) and not special_equal(torch.arange(5), torch.arange(5) + 1, 1, 1)
    c = torch.tensor([complex(1, math.nan)])
    assert special_equal(c, c.clone(), 1e-4, 1e-4) and not special_equal(c, torch.tensor([complex(1, 0)]), 1e-4, 1e-4)


def test_describe_reads_as_the_flag() -> None:
    assert describe(["x1e-3", "shift"], ["x1e3", "special:nan"]) == FLAG
    assert describe(["captured range"], ["large"]) == "passed: captured range; failed: large"


def test_a_softmax_without_the_max_shift_is_range_limited_and_the_stable_one_is_not() -> None:
    """What the oracle does with these functions, end to end on one workload."""

    def reference(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    def naive(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)

    def stable(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    expected_captured = [reference(x)]

    def judge(candidate: Any) -> tuple[list[str], list[str]]:
        assert special_equal(expected_captured[0], candidate(x), 1e-4, 1e-4)  # right on the captured range
        passed, failed = [], []
        for label, values in range_sets([x], seed=0):
            expected = [reference(*values)]  # the worker drops a set the reference raises on
            if not keep_set(label, expected_captured, expected):
                continue
            (passed if special_equal(expected[0], candidate(*values), 1e-4, 1e-4) else failed).append(label)
        return passed, failed

    passed, failed = judge(naive)
    assert "x1e3" in failed and "large" in failed and "x1e-3" in passed
    assert describe(passed, failed).startswith("passed: captured range, x1e-3")
    assert judge(stable)[1] == []


# -- the verdict, the settings ---------------------------------------------------------------------


def test_the_verdict_carries_the_flag_and_old_stored_verdicts_still_load() -> None:
    v = Verdict("c.cpp", "faster", speedup=2.0, range_limited=FLAG)
    assert v.to_json()["range_limited"] == FLAG
    assert Verdict.from_json(v.to_json()) == v
    old = {k: x for k, x in Verdict("c.cpp", "faster", speedup=2.0).to_json().items() if k not in ("range_limited", "sandbox")}
    assert Verdict.from_json(old).range_limited is None
    assert Verdict.from_json({**old, "a_field_from_the_future": 1}).status == "faster"


def test_the_decorator_takes_accept_range_limited_and_checks_it() -> None:
    def f(x: Any) -> Any:
        return x

    try:
        marked = decorator.optimize(accept_range_limited=True)(f)
        assert marked.maxcode.options.accept_range_limited is True
        assert decorator.optimize(f).maxcode.options.accept_range_limited is None
        with pytest.raises(TypeError, match="accept_range_limited= must be True or False"):
            decorator.optimize(f, accept_range_limited="yes")
    finally:
        decorator.REGISTRY.pop(decorator._target_id(f), None)


def test_pyproject_accepts_true_or_globs_and_one_rule_resolves_it(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    assert load_settings({}, None).accept_range_limited is False
    pyproject.write_text('[tool.maxcode]\naccept_range_limited = ["mylib.*"]\n')
    setting = load_settings({}, pyproject).accept_range_limited
    assert setting == ("mylib.*",)
    assert accepts_range_limited("mylib.f", None, setting) and not accepts_range_limited("other.f", None, setting)
    assert not accepts_range_limited("mylib.f", False, setting)  # the decorator's own word wins
    assert accepts_range_limited("other.f", True, False) and not accepts_range_limited("other.f", None, False)
    pyproject.write_text("[tool.maxcode]\naccept_range_limited = true\n")
    assert accepts_range_limited("any.thing", None, load_settings({}, pyproject).accept_range_limited)
    pyproject.write_text('[tool.maxcode]\naccept_range_limited = "yes"\n')
    with pytest.raises(ValueError, match=r"accept_range_limited = \"yes\": expected true, false, or a list of target-id globs"):
        load_settings({}, pyproject)


# -- the gate: apply, accept, the bot ---------------------------------------------------------------

KERNEL = 'extern "C" int maxcode_run(const void*, int, void*, int, void*) { return 0; }\n'


def project(root: Path, **fields: Any) -> dict[str, Any]:
    (root / "mylib.py").write_text("def f(x):\n    return x + 1\n")
    src = root / ".maxcode" / "reports" / "kernels" / "mylib.f.cpp"
    src.parent.mkdir(parents=True)
    src.write_text(KERNEL)
    target = {
        "id": "mylib.f", "status": "verified", "verified": True, "reason": "2x faster", "speedup": 2.0, "speedup_ci": [1.8, 2.2],
        "device": "cpu", "arch": "x86_64", "weak_check": False, "workloads": [], "sandbox": "bwrap",
        "best": {"source_path": ".maxcode/reports/kernels/mylib.f.cpp", "lang": "cpp", "hash": candidate_hash("native", "cpp", KERNEL)},
        "reference": {"module": "mylib", "qualname": "f", "file": "mylib.py"},
        "tests": {"rerun": ["tests/test_mylib.py::test_f"], "passed": True, "summary": "1 passed"},
        **fields,
    }
    return {"targets": [target], "machine": {"cpu": "x", "cores": 2}, "tool_version": "0"}


def test_a_range_limited_result_is_not_applied_by_default(tmp_path: Path) -> None:
    report = project(tmp_path, range_limited=FLAG)
    lines = apply_report(report, tmp_path)
    assert lines == [(f"mylib.f: not applied (range-limited: {FLAG}; set accept_range_limited=True in @maxcode.optimize "
                      "(or [tool.maxcode] accept_range_limited) to apply it anyway)")]
    assert not (tmp_path / "maxcode_kernels").exists() and not (tmp_path / "maxcode.lock").exists()
    with pytest.raises(MaxcodeError, match="range-limited"):
        apply_target(report["targets"][0], tmp_path)
    assert not (tmp_path / "maxcode.lock").exists()


def test_accept_refuses_a_range_limited_kernel_unless_told(tmp_path: Path) -> None:
    project(tmp_path)
    kw: dict[str, Any] = {"target_id": "mylib.f", "reference_file": tmp_path / "mylib.py", "qualname": "f", "kernel_source": KERNEL,
                          "lang": "cpp", "device": "cpu", "arch": "x86_64", "speedup": 2.0, "speedup_ci": [1.8, 2.2],
                          "range_limited": FLAG}
    with pytest.raises(MaxcodeError, match="accept_range_limited=True"):
        accept(tmp_path, **kw)
    assert not (tmp_path / "maxcode.lock").exists()
    entry = accept(tmp_path, **kw, accept_range_limited=True)
    assert entry.extra["range_limited"] == FLAG


def test_a_target_that_accepts_it_is_applied_and_its_lock_entry_says_so(tmp_path: Path) -> None:
    lines = apply_report(project(tmp_path, range_limited=FLAG, accept_range_limited=True), tmp_path)
    assert lines == ["mylib.f: applied maxcode_kernels/mylib.f.cpp (2x) to maxcode.lock"]
    assert read_lock(tmp_path / "maxcode.lock")["mylib.f"].extra["range_limited"] == FLAG


def test_a_result_without_the_flag_is_applied_as_before(tmp_path: Path) -> None:
    lines = apply_report(project(tmp_path, range_limited=None), tmp_path)
    assert lines == ["mylib.f: applied maxcode_kernels/mylib.f.cpp (2x) to maxcode.lock"]
    assert "range_limited" not in read_lock(tmp_path / "maxcode.lock")["mylib.f"].extra


def maxcode(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_"))}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "pytest_maxcode.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=full, timeout=300, check=False)


def test_no_pull_request_for_a_range_limited_result_unless_the_target_accepts_it(tmp_path: Path, fake_github: Any) -> None:
    work, origin = tmp_path / "work", tmp_path / "origin.git"
    work.mkdir()
    report = project(work, range_limited=FLAG)
    shutil.rmtree(work / ".maxcode")  # the report's kernel is not part of the checkout
    github_fake.checkout_with_origin(work, origin, "the library")
    project_kernel = work / ".maxcode" / "reports" / "kernels" / "mylib.f.cpp"
    project_kernel.parent.mkdir(parents=True)
    project_kernel.write_text(KERNEL)
    env = {"GITHUB_TOKEN": FAKE_GH_TOKEN, "GITHUB_API_URL": fake_github.url, "MAXCODE_GITHUB_WRITE_INTERVAL": "0"}
    (work / "report.json").write_text(json.dumps(report))
    assert why_not(report["targets"][0]) is not None
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"mylib.f: skipped (range-limited: {FLAG}; set accept_range_limited=True")
    assert fake_github.requests == [] and fake_github.pulls == {}
    assert [h.name for h in git.Repo(origin).heads] == ["main"]
    # the same result, for a target that accepts it: a pull request that says what it failed
    report["targets"][0]["accept_range_limited"] = True
    (work / "report.json").write_text(json.dumps(report))
    r = maxcode(work, "pr", "report.json", "--repo", "acme/mylib", env=env)
    assert r.returncode == 0 and r.stdout.startswith("mylib.f: opened "), r.stdout + r.stderr
    (pr,) = fake_github.pulls.values()
    assert f"Range-limited: {FLAG}" in pr["body"].replace("\\", "")
    assert "maxcode/optimize-mylib.f" in [h.name for h in git.Repo(origin).heads]


# -- the report -----------------------------------------------------------------------------------


def test_every_rendering_shows_the_flag_and_whether_it_was_held_back() -> None:
    report = copy.deepcopy(sample_report())
    t = next(t for t in report["targets"] if t["status"] == "verified")
    t["range_limited"] = FLAG
    console = Console(record=True, width=250)
    render_terminal(report, console)
    for name, text in {"terminal": console.export_text(), "markdown": render_markdown(report), "html": render_html(report)}.items():
        flat = " ".join(text.replace("\\", "").split())
        assert f"range-limited: {t['id']}: {FLAG} (not applied, no pull request" in flat, name
    assert fmt_verdict(t) == "verified (range-limited)"
    t["accept_range_limited"] = True
    assert "applied and proposed anyway" in render_markdown(report)
    del t["range_limited"]
    assert "range-limited" not in render_markdown(report)
