"""The rule-based critic: the oracle's facts, classified, with concrete next steps.

Every number a critique states is one the oracle measured (or one step from it: a time in
passes over the data at the measured copy bandwidth, the headroom ``1 / share`` of a roof), and
it is kept in ``facts`` under the name the text uses, so a critique can be checked against its
evidence. A correct kernel's next step follows from where its time goes, in this order: the
call path's own cost, the FLOP roof, the memory roof, arithmetic, thread use, passes over the
data. Where the oracle recorded no per-workload time or no byte count, the step follows from
what it did record (the speedup and its interval, the times, the call path, threads, instruction
counts); a failure's step names its compiler line, its reason or its mismatch. Each next step
opens with the facts it was chosen from (for a measured workload: its time and the reference's,
the shares of the roofs, the passes over the data, the call path, the threads; one helper,
``_measured_said``, for every rule), so two nodes with different facts never read the same step.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..model.search import Node
from ..oracle.verdict import Verdict

LAUNCH_BOUND_S = 20e-6  # below this per call, fixed costs (threads, allocation) dominate
NEAR_ROOF = 0.6  # share of the measured copy bandwidth (or FLOP roof) that counts as at the roof
MANY_PASSES = 3.0  # a call slower than this many copies of its data does more than one vector pass
OVERHEAD_SHARE = 0.5  # call path's share of a call above which no kernel change shows
THREADED = re.compile(r"#pragma\s+omp\s+parallel|std::thread|<<<|blockIdx|threadIdx")

COMPILE_CLASSES: list[tuple[str, re.Pattern[str], str]] = [
    ("missing-header", re.compile(r"No such file or directory|fatal error: .*\.h"), "include only the C++ standard library, <dlpack/dlpack.h> (and CUDA's own headers in .cu files)"),
    ("undeclared-identifier", re.compile(r"not declared in this scope|undeclared identifier|is undefined|was not declared"), "declare or include what the code uses, and check its spelling"),
    ("link-error", re.compile(r"undefined reference|undefined symbol|multiple definition"), "define every function the file calls in the file itself; keep maxcode_run extern \"C\""),
    ("type-error", re.compile(r"invalid conversion|cannot convert|no matching function|invalid operands"), "fix the types: DLTensor.data is void*, shapes and strides are int64_t*"),
    ("syntax", re.compile(r"expected [^\n]*(before|at end of input|;)|syntax error|stray"), "fix the syntax there; an unclosed bracket or a missing ';' just before it is the usual cause"),
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
            error = node.proposal.error or "no code block"
            return Critique("format:no-code", f"The reply had no usable code ({error}).",
                            [f"{error}: reply with one fenced block holding the whole file, defining the entry point"])
        if v.status == "compile_error":
            return _compile(v.reasons)
        if v.status in ("runtime_error", "crash", "timeout"):
            return _runtime(v.status, v.reasons)
        if v.status == "rejected":
            return Critique("rejected:harness", f"The harness rejected it: {_first(v.reasons)}.",
                            [f"{_first(v.reasons, 160) or 'rejected'}: compute every output inside the call from the inputs "
                             "alone, leave inputs, timers and threads alone"])
        if v.format == "program":
            return _program(v)
        if v.status == "wrong":
            return _wrong(v.diagnostics.get("mismatch") or {}, v.reasons)
        return _correct(v, node.code or "")


def _program(v: Verdict) -> Critique:
    """A whole program judged on test cases: its output differs on one, or it is correct and timed."""
    if v.status == "wrong":
        m = v.diagnostics.get("mismatch") or {}
        difference = m.get("difference") or _first(v.reasons)
        return Critique("wrong:program-output", f"The output differs on test case {m.get('test_case', '?')}: {difference}.",
                        [f"trace the program on {m.get('test_case', 'that input')} ({str(difference)[:120]}): integer overflow, "
                         "edge cases (empty, one element), and the exact output format"],
                        {"test_case": m.get("test_case")})
    lead = f"Correct, {v.speedup:.3g}x the original program." if v.speedup is not None else "Correct."
    at = f"at {v.speedup:.3g}x{_interval(v.speedup_ci)}" if v.speedup is not None else f"untimed ({v.status})"
    return Critique("correct:program", lead,
                    [f"{at}: cut I/O cost first (unsynchronised streams, no per-line flush, one buffered read and write), "
                     "then the algorithm's complexity"],
                    {"speedup": v.speedup, "speedup_ci": v.speedup_ci})


def _first(reasons: list[str], width: int = 200) -> str:
    text = " ".join((reasons[0] if reasons else "").split())
    return text[:width]


ERROR_LINE = re.compile(r"^(?P<loc>\S+?(?::\d+(?::\d+)?|\(\d+\))):\s*(?:fatal )?error:\s*(?P<msg>.+)$", re.M)


def _first_error(reasons: list[str], width: int = 140) -> str:
    """The compiler's first error, message then place ("'foo' was not declared in this scope at
    c.cpp:3:5"): what the next step tells the model to fix."""
    text = "\n".join(str(r) for r in reasons)
    m = ERROR_LINE.search(text)
    if m:
        return f"{' '.join(m['msg'].split())[:width]} at {m['loc']}"
    for line in text.splitlines():
        if re.search(r"error|undefined|multiple definition", line, re.I):
            return " ".join(line.split())[:width]
    return _first(reasons, width) or "no compiler message"


def _compile(reasons: list[str]) -> Critique:
    text = " ".join(reasons)
    error = _first_error(reasons)
    facts = {"first_error": error}
    for kind, pattern, step in COMPILE_CLASSES:
        if pattern.search(text):
            return Critique(f"compile:{kind}", f"It does not compile: {_first(reasons)}.", [f"{error}: {step}"], facts)
    return Critique("compile:other", f"It does not compile: {_first(reasons)}.",
                    [f"{error}: fix this first error; the rest often follow from it"], facts)


def _runtime(status: str, reasons: list[str]) -> Critique:
    text = " ".join(reasons)
    said = _first(reasons, 160) or status
    facts = {"reason": said}
    if status == "timeout":
        return Critique("runtime:timeout", f"It did not finish in time: {_first(reasons)}.",
                        [f"{said}: look for a loop that never ends or work that grows with the wrong dimension"], facts)
    if "SIGSEGV" in text or "SIGBUS" in text or "illegal memory" in text.lower():
        return Critique("runtime:out-of-bounds", f"It read or wrote outside the tensors: {_first(reasons)}.",
                        [f"{said}: derive every index from the shapes and strides the call receives, and bound the last "
                         "partial block"], facts)
    m = re.search(r"returned (-?\d+)", text)
    if m:
        return Critique("runtime:error-code", f"maxcode_run returned {m.group(1)}.",
                        [f"it returned {m.group(1)}: return 0 on success; check the argument counts it expects"],
                        {"return_code": int(m.group(1))})
    return Critique(f"runtime:{status}", f"It failed at run time: {_first(reasons)}.", [f"fix the {status.replace('_', ' ')}: {said}"], facts)


def _mismatch_said(m: dict[str, Any], reasons: list[str]) -> str:
    """The mismatch's own facts in a few words: share wrong, where, got and expected, the
    largest error, NaNs, which output and input set; the reason where none was recorded."""
    said = []
    if m.get("fraction_wrong") is not None:
        said.append(f"{100 * m['fraction_wrong']:.3g}% wrong")
    if m.get("output") is not None:
        said.append(f"output {m['output']}")
    if m.get("first_bad_index") is not None:
        said.append(f"first at {m['first_bad_index']}")
    if m.get("got") is not None or m.get("expected") is not None:
        said.append(f"got {m.get('got')}, expected {m.get('expected')}")
    error = m.get("max_abs_error")
    if isinstance(error, (int, float)) and math.isfinite(error):  # the compare's largest over finite differences
        said.append(f"largest finite error {error:.3g}")
    if m.get("n_nan"):
        said.append(f"{m['n_nan']} NaN")
    if m.get("input_set") is not None:
        said.append(f"input set {m['input_set']}")
    return "; ".join(said) or _first(reasons, 160) or "the outputs differ"


def _wrong(m: dict[str, Any], reasons: list[str]) -> Critique:
    frac = m.get("fraction_wrong")
    facts = {k: m[k] for k in ("fraction_wrong", "first_bad_index", "got", "expected", "n_nan", "max_abs_error") if k in m}
    said = _mismatch_said(m, reasons)
    if m.get("timed"):
        return Critique("wrong:only-when-timed", "Correct when checked, wrong in a timed repeat: it keeps state between calls or races.",
                        [f"{said}{'' if 'timed' in said else ' in a timed repeat'}: keep nothing between calls (no static buffers), and join all work "
                         "before returning"], facts)
    if frac is None:
        return Critique("wrong:other", f"The output is wrong: {_first(reasons)}.",
                        [f"{said}: compare the formula with the reference line by line"], facts)
    pct = f"{100 * frac:.3g}%"
    poison = bool(m.get("n_nan")) or isinstance(m.get("got"), str)  # NaN/inf: the harness's poison, never written
    if frac > 0.99 and poison:
        return Critique("wrong:unwritten-output", f"The output was left unwritten ({pct} of elements wrong, NaN or poison values where results belong).",
                        [f"{said}: write every element of every output; check the output pointer and loop bounds"], facts)
    if frac > 0.99:
        return Critique("wrong:formula", f"Every element differs ({pct}; first at {m.get('first_bad_index')}: got {m.get('got')}, expected {m.get('expected')}).",
                        [f"{said}: the formula or the operand order differs from the reference; check signs, constants "
                         "and broadcasting"], facts)
    what = "left unwritten" if poison else "wrong"
    return Critique("wrong:partial", f"Part of the output is {what} ({pct} of elements; first at {m.get('first_bad_index')}).",
                    [f"{said}: check the tail after the last full block or vector, and how work is split between threads"], facts)


@dataclass
class Measured:
    """The timing facts of one correct candidate's slowest-to-the-roof workload, in the units a
    critique quotes them in: what the next step is chosen from."""

    workload: str
    time_s: float | None
    reference_s: float | None
    bw: float | None  # share of the measured copy bandwidth
    flops: float | None  # share of the measured FLOP roof
    bytes_per_call: int | None
    machine_bps: float | None
    overhead_s: float | None  # the call path's own cost per call
    threads: int | None  # threads the oracle gives a candidate
    threaded: bool  # the code starts parallel work

    def copy_s(self) -> float | None:
        """What moving the call's bytes once at the measured copy bandwidth takes."""
        if self.bytes_per_call and self.machine_bps:
            return self.bytes_per_call / self.machine_bps
        return None

    def passes(self, seconds: float | None) -> float | None:
        """A time in units of one pass over the call's data at the copy bandwidth."""
        copy = self.copy_s()
        return seconds / copy if seconds and copy else None


def measured(diagnostics: dict[str, Any], code: str) -> Measured | None:
    workloads = diagnostics.get("workloads") or {}
    if not workloads:
        return None

    def roof_share(item: tuple[str, dict[str, Any]]) -> float:
        d = item[1]
        shares = [x for x in (d.get("bandwidth_fraction"), d.get("flops_fraction")) if x is not None]
        return max(shares) if shares else 0.0

    name, d = min(workloads.items(), key=roof_share)  # the workload furthest from its roof
    overhead = diagnostics.get("call_overhead_us")
    return Measured(name, (d.get("candidate") or {}).get("median_s"), (d.get("reference") or {}).get("median_s"),
                    d.get("bandwidth_fraction"), d.get("flops_fraction"), d.get("bytes_per_call"),
                    diagnostics.get("machine_bytes_per_s"), overhead * 1e-6 if isinstance(overhead, (int, float)) else None,
                    diagnostics.get("threads"), bool(THREADED.search(code)))


def _us(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _correct(v: Verdict, code: str = "") -> Critique:
    """The next step follows from where the time goes: the call path, the FLOP roof, the
    memory roof, thread use, or the passes over the data; every sentence carries its numbers.
    A candidate correct only on the captured range is told to fix that first: it is not applied
    until it holds beyond it."""
    speedup = v.speedup
    lead = f"Correct, {speedup:.3g}x the reference." if speedup is not None else "Correct."
    m = measured(v.diagnostics, code)
    if m is None or m.time_s is None:
        found = _unmeasured(v, lead, code)
    else:
        facts: dict[str, Any] = {"speedup": speedup, "speedup_ci": v.speedup_ci}
        facts.update({"workload": m.workload, "candidate_s": m.time_s, "reference_s": m.reference_s, "bandwidth_fraction": m.bw,
                      "flops_fraction": m.flops, "call_overhead_s": m.overhead_s, "threads": m.threads,
                      "bytes_per_call": m.bytes_per_call, "copy_s": m.copy_s(), "passes": m.passes(m.time_s),
                      "reference_passes": m.passes(m.reference_s)})
        facts = {k: x for k, x in facts.items() if x is not None}
        where = _measured_said(m, v)
        for rule in (_overhead, _flop_roof, _memory_roof, _compute_below_roof, _one_thread):
            ruled = rule(m, lead, where)
            if ruled is not None:
                ruled.facts = {**facts, **ruled.facts}
                found = ruled
                break
        else:
            found = _below_roof(m, lead, facts, v, where)
    if v.range_limited:
        found.facts["range_limited"] = v.range_limited
        found.next_steps.insert(0, f"first make it correct beyond the captured range ({v.range_limited}): "
                                   "until then it is not applied")
    return found


def _interval(ci: list[float] | None) -> str:
    if not ci or len(ci) != 2 or not all(isinstance(x, (int, float)) for x in ci):
        return ""
    return f" (95% CI {ci[0]:.3g}x to {ci[1]:.3g}x)"


def _width(ci: list[float] | None) -> float | None:
    """The interval's high end over its low end: how far the timing alone can move a ranking."""
    if not _interval(ci) or not ci or ci[0] <= 0:
        return None
    return ci[1] / ci[0]


def _threads_said(threads: int | None, threaded: bool) -> str | None:
    if not threads:
        return None
    if threaded:
        return f"on {threads} thread{'s' if threads > 1 else ''}"
    return f"on 1 of {threads} threads" if threads > 1 else "on its 1 thread"


def _instructions(diagnostics: dict[str, Any]) -> tuple[str, float, float] | None:
    """The workload whose instruction count (the instructions timer's measure) is furthest
    above the reference's: (name, candidate, reference)."""
    counted = [(name, d["candidate_instructions"], d["reference_instructions"])
               for name, d in (diagnostics.get("workloads") or {}).items()
               if isinstance(d.get("candidate_instructions"), (int, float)) and d.get("reference_instructions")]
    return max(counted, key=lambda x: x[1] / x[2]) if counted else None


def _unmeasured(v: Verdict, lead: str, code: str) -> Critique:
    """No per-workload time: the step follows from what the verdict does carry (the speedup and
    its interval, the times, the call path, threads, instruction counts), and names it."""
    d = v.diagnostics
    threads = d.get("threads") if isinstance(d.get("threads"), int) else None
    threaded = bool(THREADED.search(code))
    overhead = d.get("call_overhead_us")
    overhead_s = overhead * 1e-6 if isinstance(overhead, (int, float)) else None
    counted = _instructions(d)
    width = _width(v.speedup_ci)
    said = [f"at {v.speedup:.3g}x{_interval(v.speedup_ci)}" if v.speedup is not None else f"untimed ({v.status})"]
    if v.candidate_s is not None:
        said.append(f"{_us(v.candidate_s)} a call" + (f" against the reference's {_us(v.reference_s)}" if v.reference_s else ""))
    if overhead_s is not None:
        said.append(f"{_us(overhead_s)} of it the call path")
    on = _threads_said(threads, threaded)
    if on:
        said.append(on)
    if counted is not None:
        said.append(f"{counted[1]:.4g} instructions a call on {counted[0]} against the reference's {counted[2]:.4g}")
    where = ", ".join(said)
    facts = {"speedup": v.speedup, "speedup_ci": v.speedup_ci, "candidate_s": v.candidate_s, "reference_s": v.reference_s,
             "call_overhead_s": overhead_s, "threads": threads, "interval_width": width,
             "candidate_instructions": counted[1] if counted else None, "reference_instructions": counted[2] if counted else None}
    facts = {k: x for k, x in facts.items() if x is not None}
    if v.speedup is None:
        kind, step = "correct:untimed", (f"{where}{': ' + _first(v.reasons, 120) if v.reasons else ''}: with no timing to "
                                         "steer by, make the change that pays on any machine: one pass over the data, "
                                         "a vector inner loop" + ("" if threaded else ", the outer loop across threads"))
    elif d.get("undecided"):
        kind, step = "correct:undecided", (f"{where}: the interval{f' spans a factor of {width:.3g} and' if width else ''} cannot "
                                           "tell it from the reference; aim for a change that wins by more than that spread "
                                           "(fewer passes, more threads), not a small tweak")
    elif overhead_s is not None and v.candidate_s and overhead_s >= OVERHEAD_SHARE * v.candidate_s:
        kind, step = "correct:overhead-bound", (f"{where}: the call path is {_pct(overhead_s / v.candidate_s)} of a call, and "
                                                "no kernel change wins that back; keep per-call set-up out of the kernel, or stop")
    elif threads and threads > 1 and not threaded:
        kind, step = "correct:one-thread", f"{where}: split the outer loop across the {threads} threads, a contiguous chunk each"
    elif counted is not None and counted[1] > counted[2]:
        kind, step = "correct:instructions", (f"{where}: cut instructions per element (vector loads and arithmetic, "
                                              "invariants hoisted, no division or call per element)")
    elif v.speedup < 1:
        kind, step = "correct:slower", (f"{where}: it loses to the reference; find the extra pass or scalar loop the "
                                        "reference avoids, fuse the steps into one pass and vectorize its inner loop")
    else:
        kind, step = "correct:unmeasured", (f"{where}, with no byte count so no roof to measure against: fuse any passes "
                                            "left into one and vectorize its contiguous inner loop, then compare again")
    recorded = "Only instruction counts were recorded" if counted else "No per-workload time was recorded"
    return Critique(kind, f"{lead} {recorded}, and no byte count, so no roof applies.", [step], facts)


def _measured_said(m: Measured, v: Verdict) -> str:
    """The measured facts every measured rule's next step opens with: the workload's time and
    the reference's, the speedup and its interval, the shares of the roofs, the passes over the
    data (the candidate's and the reference's), the call path's cost and the threads. One helper
    for every rule, so that a fact the chosen rule does not weigh still reaches the text, and two
    nodes with different facts never read the same step."""
    t = m.time_s or 0.0
    said = [f"{_us(t)} a call on {m.workload}" + (f" against the reference's {_us(m.reference_s)}" if m.reference_s else "")]
    if v.speedup is not None:
        said.append(f"{v.speedup:.3g}x{_interval(v.speedup_ci)}")
    if m.bw is not None:
        said.append(f"{_pct(m.bw)} of the bandwidth (up to {1 / m.bw:.2g}x left)" if m.bw > 0 else "none of the bandwidth")
    if m.flops is not None:
        said.append(f"{_pct(m.flops)} of the FLOP roof")
    mine, ref = m.passes(m.time_s), m.passes(m.reference_s)
    if mine is not None:
        said.append(f"the time of {mine:.3g} passes over the data" + (f" against the reference's {ref:.3g}" if ref is not None else ""))
    if m.overhead_s is not None:
        said.append(f"{_us(m.overhead_s)} of it the call path")
    on = _threads_said(m.threads, m.threaded)
    if on:
        said.append(on)
    return ", ".join(said)


def _overhead(m: Measured, lead: str, where: str) -> Critique | None:
    t = m.time_s or 0.0
    threads = m.threaded  # a thread team costs more than the work at this size
    if m.overhead_s is not None and m.overhead_s >= OVERHEAD_SHARE * t:
        kernel = max(t - m.overhead_s, 0.0)
        setup = ("no allocation, and no thread team for about " + _us(kernel) + " of work: run it on one thread"
                 if threads else "no allocation, no descriptor work beyond reading the pointers")
        return Critique("correct:overhead-bound",
                        f"{lead} On {m.workload} a call takes {_us(t)}, of which the call path itself takes {_us(m.overhead_s)} "
                        f"({_pct(m.overhead_s / t)}); the kernel's own share is about {_us(kernel)}.",
                        [f"{where}: the call path is {_pct(m.overhead_s / t)} of a call, and no kernel change wins that back "
                         f"at this size: keep the kernel free of per-call set-up ({setup}), or stop here"])
    if m.overhead_s is None and t < LAUNCH_BOUND_S:
        setup = ("start no thread team for so little work: run this size on one thread, and allocate nothing per call"
                 if threads else "allocate nothing per call and keep set-up (tables, descriptors) out of the call")
        return Critique("correct:overhead-bound", f"{lead} On {m.workload} a call takes {_us(t)}: fixed costs per call dominate at this size.",
                        [f"{where}: under {_us(LAUNCH_BOUND_S)} a call, fixed costs dominate: {setup}"])
    return None


def _flop_roof(m: Measured, lead: str, where: str) -> Critique | None:
    if m.flops is None or m.flops < NEAR_ROOF:
        return None
    return Critique("correct:compute-roof",
                    f"{lead} On {m.workload} it computes at {_pct(m.flops)} of the measured FLOP roof: near the roof, "
                    f"at most {1 / m.flops:.2g}x is left by computing faster.",
                    [f"{where}: near the FLOP roof, only doing fewer FLOPs helps now (fold constants, reuse a product, skip "
                     "work the output does not need); otherwise stop"])


def _memory_roof(m: Measured, lead: str, where: str) -> Critique | None:
    if m.bw is None or m.bw < NEAR_ROOF:
        return None
    copy = m.copy_s()
    moved = f" (copying its {m.bytes_per_call} bytes once takes {_us(copy)}, it takes {_us(m.time_s or 0.0)})" if copy else ""
    mine, ref = m.passes(m.time_s), m.passes(m.reference_s)
    won = ", in fewer passes than the reference" if mine is not None and ref is not None and ref > mine else ""
    return Critique("correct:memory-bound",
                    f"{lead} On {m.workload} it moves data at {_pct(m.bw)} of the measured memory bandwidth{moved}: near the roof, "
                    f"at most {1 / m.bw:.2g}x is left.",
                    [f"{where}: near the memory roof{won}: the rest is traffic the caches add, chiefly the outputs' write-allocate "
                     "reads: write outputs with streaming (non-temporal) stores, or fuse away an output or a temporary; otherwise stop"])


def _compute_below_roof(m: Measured, lead: str, where: str) -> Critique | None:
    if m.flops is None or m.bw is None or m.flops <= m.bw:
        return None
    spread = "" if m.threaded or (m.threads or 0) < 2 else f", and split the outer loop across the {m.threads} threads"
    return Critique("correct:compute-bound",
                    f"{lead} On {m.workload} it computes at {_pct(m.flops)} of the measured FLOP roof and moves data at "
                    f"{_pct(m.bw)} of the bandwidth: arithmetic limits it.",
                    [f"{where}: arithmetic limits it, up to {1 / m.flops:.2g}x below the FLOP roof: block the loops for cache and "
                     f"registers so each loaded value feeds many multiply-adds, vectorize the innermost dimension with FMA{spread}"])


def _one_thread(m: Measured, lead: str, where: str) -> Critique | None:
    if m.threaded or not m.threads or m.threads < 2:
        return None
    return Critique("correct:one-thread",
                    f"{lead} On {m.workload} it runs on one thread of the {m.threads} it may use"
                    + (f", at {_pct(m.bw)} of the measured memory bandwidth" if m.bw is not None else "") + ".",
                    [f"{where}: split the outer loop across the {m.threads} threads (#pragma omp parallel for), "
                     "keeping each thread's chunk contiguous"])


def _below_roof(m: Measured, lead: str, facts: dict[str, Any], v: Verdict, where: str) -> Critique:
    """Below both roofs: the time in passes over the data says whether the work is spread over
    several passes (or a scalar loop) or is one pass that the inner loop's code slows. Without a
    byte count (or a copy bandwidth) there are no passes: the step follows from the times, the
    share of the bandwidth if known, the interval and the threads."""
    share = f"{_pct(m.bw)} of the measured memory bandwidth" if m.bw is not None else "an unmeasured share of the bandwidth"
    mine, ref = m.passes(m.time_s), m.passes(m.reference_s)
    if mine is None:
        return _no_bytes(m, lead, facts, v, where)
    theirs = f" (the reference: {ref:.3g})" if ref is not None else ""
    diagnosis = (f"{lead} On {m.workload} a call takes {_us(m.time_s or 0.0)}, moving data at {share}: the time of {mine:.3g} "
                 f"passes over its {m.bytes_per_call} bytes at the copy bandwidth{theirs}, where one pass takes {_us(m.copy_s() or 0.0)}.")
    chunks = "" if m.threaded else " and give each thread a contiguous chunk"
    if mine >= MANY_PASSES:
        fewer = (f"the reference needs the time of only {ref:.3g}: find the extra pass or scalar loop it avoids, then "
                 if ref is not None and ref < mine else "")
        step = (f"{where}: {fewer}read each input once and write each output once (fuse the steps, no temporaries between "
                "them), and make that one pass vector code: contiguous inner loop, no division, branch or call per element")
    else:
        step = (f"{where}: it is close to one pass: vectorize the inner loop over the contiguous dimension (aligned loads, no "
                f"division or branch per element){chunks}")
    return Critique("correct:below-roof", diagnosis, [step], facts)


def _no_bytes(m: Measured, lead: str, facts: dict[str, Any], v: Verdict, where: str) -> Critique:
    """No byte count (or no copy bandwidth): the step follows from the times, the interval, the
    share of a roof where one is known, the call path and the threads (``where`` names them)."""
    t = m.time_s or 0.0
    if v.diagnostics.get("undecided"):
        step = f"{where}: too noisy to rank; aim for a change that wins by more than the interval's spread, not a small tweak"
    elif m.reference_s and t > m.reference_s:
        step = (f"{where}: it loses to the reference; find the extra pass or scalar loop the reference avoids, fuse the "
                "steps into one pass and vectorize its inner loop")
    elif m.threaded or (m.threads or 1) < 2:
        step = f"{where}: vectorize the contiguous inner loop (aligned loads, no division or branch per element)"
    else:
        step = f"{where}: vectorize the contiguous inner loop and give each thread a contiguous chunk"
    missing = f"No byte count on {m.workload}" if not m.bytes_per_call else "No copy bandwidth was measured"
    diagnosis = f"{lead} {missing}, so no passes over the data to weigh its time by."
    return Critique("correct:below-roof", diagnosis, [step], facts)
