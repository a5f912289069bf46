"""Prompt building, observation settings and reply parsing, unit by unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maxcode.oracle.check import CandidateSpec
from pytest_maxcode.oracle.verdict import Verdict
from pytest_maxcode.search.observation import HEADERS, parse_observation
from pytest_maxcode.search.prompts import PromptContext, build_request, parse_reply, reference_text
from pytest_maxcode.search.state import Proposal, SearchState

GOOD = 'extern "C" int maxcode_run(const DLTensor* i, int32_t ni, DLTensor* o, int32_t no, void* s) { return 0; }'


def ctx(**kw) -> PromptContext:
    base = dict(
        target_id="mylib.fused_chain", kind="function", reference_source="def fused_chain(x, bias):\n    return x + bias\n",
        fmt="native", lang="cpp", entry="maxcode_run",
        workloads=[{"name": "w0", "signature": "(f32[4096,1024]@cpu, f32[1024]@cpu)", "outputs": [[[4096, 1024], "float32"]]}],
        device={"name": "Test CPU", "cores": 2, "bytes_per_s": 12.5e9},
    )
    base.update(kw)
    return PromptContext(**base)


def spec(text: str) -> CandidateSpec:
    return CandidateSpec(Path(f"/tmp/c{abs(hash(text))}.cpp"), "native", "cpp", text)


def grown_state() -> SearchState:
    """#0 fails to compile, #1 (from #0) is correct 1.8x, #2 (from #1) is wrong."""
    state = SearchState("mylib.fused_chain")
    a = state.add(Proposal(spec("// A\n" + GOOD), "test"), Verdict("a", "compile_error", reasons=["a.cpp:3: error: 'foo' was not declared"]), 0)
    b = state.add(Proposal(spec("// B\n" + GOOD), "test", parent=a, mode="fix"),
                  Verdict("b", "faster", speedup=1.8, speedup_ci=[1.6, 2.0], reference_s=2e-3, candidate_s=1.1e-3, reasons=["1.8x"]), 1)
    b.critique = "memory-bound at 40% of the measured bandwidth"
    state.add(Proposal(spec("// C\n" + GOOD), "test", parent=b, mode="improve"),
              Verdict("c", "wrong", reasons=["output 0: 12% of elements differ; first at [0, 3]"]), 2)
    return state


def test_system_prompt_states_task_interface_reference_workloads_device() -> None:
    system = ctx().system()
    for needle in ("maxcode_run", "DLTensor", "def fused_chain", "f32[4096,1024]", "float32[4096, 1024]", "Test CPU", "2 cores", "12.5 GB/s", "```cpp"):
        assert needle in system, needle
    compat = ctx(fmt="compat", lang="py", entry="fused_chain").system()
    assert "maxcode_run" not in compat and "defines fused_chain" in compat and "load_inline" in compat
    cuda = PromptContext(**{**ctx().__dict__, "lang": "cuda", "device": {"name": "NVIDIA H100", "sms": 132}}).system()
    assert "132 SMs" in cuda and "CUDA stream" in cuda


def test_the_static_prefix_does_not_change_as_the_search_grows() -> None:
    empty, grown = SearchState("t"), grown_state()
    r1 = build_request(ctx(), empty, None, "initial", ("trajectory", "best"), 0)
    r2 = build_request(ctx(), grown, grown.trajectory[1], "improve", ("trajectory", "best"), 0)
    assert r1.system == r2.system  # the provider's prompt cache serves it
    assert r1.key("anthropic", "m") != r2.key("anthropic", "m")
    assert build_request(ctx(), empty, None, "initial", ("best",), 1).key("a", "m") != r1.key("a", "m")  # samples differ


@pytest.mark.parametrize(
    "setting",
    ["feedback", "trajectory", "best", "trajectory+best", "feedback+trajectory", "feedback+trajectory+best", "trajectory+critique+best", "critique"],
)
def test_each_observation_setting_shows_exactly_its_parts(setting: str) -> None:
    state = grown_state()
    parts = parse_observation(setting)
    text = build_request(ctx(), state, state.trajectory[1], "improve", parts, 0).messages[0].content
    for part, header in HEADERS.items():
        assert (header in text) == (part in parts), (setting, header)
    assert "## Your task now" in text and "candidate #1" in text
    assert "Baseline" in text and "2000.0 us" in text  # measured by #1's run
    assert ("1.8x" in text) == any(p in parts for p in ("feedback", "trajectory", "best"))
    if "critique" in parts:
        assert "memory-bound at 40%" in text
    # the code to improve is always there, once
    assert text.count("// B") == 1


def test_trajectory_lists_every_attempt_with_parent_and_reason() -> None:
    state = grown_state()
    text = build_request(ctx(), state, None, "initial", ("trajectory",), 0).messages[0].content
    assert "#0 from the reference: compile_error - a.cpp:3: error" in text
    assert "#1 from #0: faster 1.8x" in text
    assert "#2 from #1: wrong - output 0: 12% of elements differ" in text
    assert "// A" not in text  # the trajectory setting lists attempts, it does not show their code


def test_fix_mode_names_the_failure() -> None:
    state = grown_state()
    text = build_request(ctx(), state, state.trajectory[0], "fix", ("feedback",), 0).messages[0].content
    assert "Candidate #0 failed (compile_error)" in text and "'foo' was not declared" in text


def test_first_prompt_has_no_observation_and_says_baseline_unknown() -> None:
    text = build_request(ctx(), SearchState("t"), None, "initial", ("trajectory", "best", "feedback"), 0).messages[0].content
    assert not any(h in text for h in HEADERS.values())
    assert "Not measured yet" in text and "first implementation" in text


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("I would fuse the loops.", "no fenced code block"),
        ("```cpp\nint main() {}\n```", "defines no maxcode_run"),
        ("```python\nprint(1)\n```", "not cpp"),
        (f"Plan.\n```cpp\n{GOOD}\n", "not closed"),
    ],
)
def test_replies_without_usable_code_are_format_failures(reply: str, error: str) -> None:
    code, why = parse_reply(reply, "native", "cpp", "maxcode_run")
    assert code is None and error in why


def test_the_block_with_the_entry_point_is_taken() -> None:
    reply = f"Helper first:\n```cpp\nstatic int helper();\n```\nThe file:\n```c++\n#include <cstdint>\n{GOOD}\n```\nDone."
    code, why = parse_reply(reply, "native", "cpp", "maxcode_run")
    assert why is None and code.startswith("#include <cstdint>") and "maxcode_run" in code
    code, why = parse_reply(f"~~~\n{GOOD}\n~~~", "native", "cpp", "maxcode_run")
    assert why is None and "maxcode_run" in code


def test_bad_observation_setting_is_one_line() -> None:
    with pytest.raises(ValueError, match="use parts from feedback, trajectory, best, critique"):
        parse_observation("trajectory+everything")


def test_reference_text_keeps_docstring_and_imports_drops_decorator(tmp_path: Path) -> None:
    f = tmp_path / "lib.py"
    f.write_text("import torch\nimport pytest_maxcode as maxcode\n\n\n@maxcode.optimize(lang='cpp')\ndef f(x):\n    \"\"\"Doc.\"\"\"\n    return x * 2  # twice\n")
    text = reference_text(f, "f")
    assert text.startswith("import torch") and "pytest_maxcode" not in text and "@maxcode" not in text
    assert '"""Doc."""' in text and "# twice" in text
