"""The rule-based critic: the oracle's facts, classified, with concrete next steps.

Every number a critique states is one the oracle measured, and it is kept in ``facts``
under the name the text uses, so a critique can be checked against its evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..model.search import Node
from ..oracle.verdict import Verdict

LAUNCH_BOUND_S = 20e-6  # below this per call, fixed costs (threads, allocation) dominate
NEAR_ROOF = 0.6  # share of the measured copy bandwidth that counts as memory-bound

COMPILE_CLASSES: list[tuple[str, re.Pattern[str], str]] = [
    ("missing-header", re.compile(r"No such file or directory|fatal error: .*\.h"), "include only the C++ standard library, <dlpack/dlpack.h> (and CUDA's own headers in .cu files)"),
    ("undeclared-identifier", re.compile(r"not declared in this scope|undeclared identifier|is undefined|was not declared"), "declare or include what the code uses, and check its spelling"),
    ("link-error", re.compile(r"undefined reference|undefined symbol|multiple definition"), "define every function the file calls in the file itself; keep maxcode_run extern \"C\""),
    ("type-error", re.compile(r"invalid conversion|cannot convert|no matching function|invalid operands"), "fix the types: DLTensor.data is void*, shapes and strides are int64_t*"),
    ("syntax", re.compile(r"expected [^\n]*(before|at end of input|;)|syntax error|stray"), "fix the syntax at the line the compiler names"),
]


@dataclass
class Critique:
    kind: str  # a class: compile:undeclared-identifier, wrong:unwritten-output, correct:memory-bound, ...
    diagnosis: str
    next_steps: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # the measured values the text cites
    critic: str = "rules"
    unsupported: list[str] = field(default_factory=list)  # claims no measured fact supports
    llm_call_id: int | None = None

    def text(self) -> str:
        steps = "; ".join(self.next_steps)
        out = f"[{self.kind}] {self.diagnosis}" + (f" Next: {steps}." if steps else "")
        if self.unsupported:
            out += f" (Not measured, do not rely on: {', '.join(self.unsupported)}.)"
        return out


class RuleCritic:
    name = "rules"
    label = "rules"

    def critique_all(self, nodes: list[Node]) -> list[Critique]:
        return [self.critique(n) for n in nodes]

    def critique(self, node: Node) -> Critique:
        v = node.verdict
        if v.status == "format":
            return Critique("format:no-code", f"The reply had no usable code ({node.proposal.error or 'no code block'}).",
                            ["reply with one fenced block holding the whole file, defining the entry point"])
        if v.status == "compile_error":
            return _compile(v.reasons)
        if v.status in ("runtime_error", "crash", "timeout"):
            return _runtime(v.status, v.reasons)
        if v.status == "rejected":
            return Critique("rejected:harness", f"The harness rejected it: {_first(v.reasons)}.",
                            ["compute every output inside the call from the inputs alone, leave inputs, timers and threads alone"])
        if v.format == "program":
            return _program(v)
        if v.status == "wrong":
            return _wrong(v.diagnostics.get("mismatch") or {}, v.reasons)
        return _correct(v.speedup, v.diagnostics)


def _program(v: Verdict) -> Critique:
    """A whole program judged on test cases: its output differs on one, or it is correct and timed."""
    if v.status == "wrong":
        m = v.diagnostics.get("mismatch") or {}
        return Critique("wrong:program-output", f"The output differs on test case {m.get('test_case', '?')}: {m.get('difference') or _first(v.reasons)}.",
                        ["trace the program on that input: integer overflow, edge cases (empty, one element), and the exact output format"],
                        {"test_case": m.get("test_case")})
    lead = f"Correct, {v.speedup:.3g}x the original program." if v.speedup is not None else "Correct."
    return Critique("correct:program", lead,
                    ["cut I/O cost first (unsynchronised streams, no per-line flush, one buffered read and write), then the algorithm's complexity"],
                    {"speedup": v.speedup})


def _first(reasons: list[str], width: int = 200) -> str:
    text = " ".join((reasons[0] if reasons else "").split())
    return text[:width]


def _compile(reasons: list[str]) -> Critique:
    text = " ".join(reasons)
    for kind, pattern, step in COMPILE_CLASSES:
        if pattern.search(text):
            return Critique(f"compile:{kind}", f"It does not compile: {_first(reasons)}.", [step])
    return Critique("compile:other", f"It does not compile: {_first(reasons)}.", ["fix the first error the compiler names; the rest often follow from it"])


def _runtime(status: str, reasons: list[str]) -> Critique:
    text = " ".join(reasons)
    if status == "timeout":
        return Critique("runtime:timeout", f"It did not finish in time: {_first(reasons)}.",
                        ["look for a loop that never ends or work that grows with the wrong dimension"])
    if "SIGSEGV" in text or "SIGBUS" in text or "illegal memory" in text.lower():
        return Critique("runtime:out-of-bounds", f"It read or wrote outside the tensors: {_first(reasons)}.",
                        ["derive every index from the shapes and strides the call receives, and bound the last partial block"])
    m = re.search(r"returned (-?\d+)", text)
    if m:
        return Critique("runtime:error-code", f"maxcode_run returned {m.group(1)}.", ["return 0 on success; check the argument counts it expects"],
                        {"return_code": int(m.group(1))})
    return Critique(f"runtime:{status}", f"It failed at run time: {_first(reasons)}.", ["fix the failure named above"])


def _wrong(m: dict[str, Any], reasons: list[str]) -> Critique:
    frac = m.get("fraction_wrong")
    facts = {k: m[k] for k in ("fraction_wrong", "first_bad_index", "got", "expected", "n_nan", "max_abs_error") if k in m}
    if m.get("timed"):
        return Critique("wrong:only-when-timed", "Correct when checked, wrong in a timed repeat: it keeps state between calls or races.",
                        ["keep nothing between calls (no static buffers), and join all work before returning"], facts)
    if frac is None:
        return Critique("wrong:other", f"The output is wrong: {_first(reasons)}.", ["compare the formula with the reference line by line"], facts)
    pct = f"{100 * frac:.3g}%"
    poison = bool(m.get("n_nan")) or isinstance(m.get("got"), str)  # NaN/inf: the harness's poison, never written
    if frac > 0.99 and poison:
        return Critique("wrong:unwritten-output", f"The output was left unwritten ({pct} of elements wrong, NaN or poison values where results belong).",
                        ["write every element of every output; check the output pointer and loop bounds"], facts)
    if frac > 0.99:
        return Critique("wrong:formula", f"Every element differs ({pct}; first at {m.get('first_bad_index')}: got {m.get('got')}, expected {m.get('expected')}).",
                        ["the formula or the operand order differs from the reference: check signs, constants and broadcasting"], facts)
    what = "left unwritten" if poison else "wrong"
    return Critique("wrong:partial", f"Part of the output is {what} ({pct} of elements; first at {m.get('first_bad_index')}).",
                    ["check the tail after the last full block or vector, and how work is split between threads"], facts)


def _correct(speedup: float | None, diagnostics: dict[str, Any]) -> Critique:
    workloads = diagnostics.get("workloads") or {}
    fracs = {n: d["bandwidth_fraction"] for n, d in workloads.items() if d.get("bandwidth_fraction") is not None}
    times = {n: d["candidate"]["median_s"] for n, d in workloads.items() if (d.get("candidate") or {}).get("median_s")}
    facts: dict[str, Any] = {"speedup": speedup}
    lead = f"Correct, {speedup:.3g}x the reference." if speedup is not None else "Correct."
    if times and max(times.values()) < LAUNCH_BOUND_S:
        t = max(times.values())
        facts["candidate_s"] = t
        return Critique("correct:overhead-bound", f"{lead} A call takes {t * 1e6:.1f} us: fixed costs per call dominate at this size.",
                        ["avoid per-call set-up (thread pools for tiny inputs, allocations); run small sizes on one thread"], facts)
    if not fracs:
        return Critique("correct:unmeasured", lead, ["make it faster: fuse passes, vectorize, parallelize"], facts)
    worst = min(fracs, key=fracs.get)
    frac = fracs[worst]
    facts["bandwidth_fraction"] = frac
    if frac >= NEAR_ROOF:
        return Critique("correct:memory-bound", f"{lead} It moves data at {100 * frac:.0f}% of the measured memory bandwidth: near the roof.",
                        ["only moving fewer bytes helps now: one pass over the data, no temporaries"], facts)
    return Critique("correct:below-roof", f"{lead} It moves data at {100 * frac:.0f}% of the measured memory bandwidth on {worst}: below the memory roof, so the code itself limits it.",
                    ["vectorize the inner loop, parallelize the outer one, and avoid extra passes or divisions"], facts)
