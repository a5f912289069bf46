"""A real search sends the complete prompt: the model is told every input by position, name and
layout, as the oracle's worker will pass them (issue 17, deliverable 1, end to end)."""

from __future__ import annotations

from pathlib import Path

from conftest import DATA, run_maxcode
from llm_fakes import FAKE_KEY, FakeLLMServer, code_reply

KB = DATA / "kernelbench"


def test_the_search_prompt_lists_every_input_and_output(tmp_path: Path) -> None:
    good = (DATA / "chain" / "good.cpp").read_text()
    with FakeLLMServer("anthropic") as srv:
        srv.respond_with(code_reply(good))
        r = run_maxcode(["bench", "kernelbench", str(KB), "--level", "1", "--problems", "1", "--budget", "1",
                         "--llm", srv.spec("claude-test"), "--no-compile-baseline", "--out", str(tmp_path / "run")],
                        cwd=tmp_path, env={"ANTHROPIC_API_KEY": FAKE_KEY})
        prompt = srv.requests[0]["system"][0]["text"]
    assert r.returncode == 0, r.stderr[-2000:]
    section = prompt[prompt.index("# Inputs (in the order the candidate receives them"):]
    # Model.forward(self, x, bias) with get_inputs() = [randn(256, 1024), randn(1024)]
    assert "- inputs[0] `x` (argument): float32, shape [256, 1024], strides [1024, 1]" in section, section[:800]
    assert "- inputs[1] `bias` (argument): float32, shape [1024], strides [1]" in section, section[:800]
    assert "- outputs[0]: float32, shape [256, 1024], strides [1024, 1]" in section, section[:800]
