"""What the oracle measured about one evaluated candidate, as named lines a critic may cite.

The LLM critic's prompt carries exactly these lines; the grounding check accepts a number
in a critique only when one of them (or the code) states it. One renderer for both keeps
what the critic saw and what it is held to the same.
"""

from __future__ import annotations

from typing import Any

from ..model.search import Node

MAX_COMPILER_LINES = 25
MAX_LINE = 300


def measured_facts(node: Node) -> list[tuple[str, str]]:
    """(name, value) pairs, values already in the units a critique would quote them in."""
    v = node.verdict
    facts: list[tuple[str, str]] = [("status", v.status)]
    if v.status == "format":
        facts.append(("reply problem", node.proposal.error or "no usable code block"))
        return facts
    if v.status == "compile_error":
        lines = [ln.rstrip()[:MAX_LINE] for r in v.reasons for ln in str(r).splitlines() if ln.strip()]
        facts.append(("compiler messages", "\n" + "\n".join(lines[:MAX_COMPILER_LINES])
                      + (f"\n({len(lines) - MAX_COMPILER_LINES} more lines)" if len(lines) > MAX_COMPILER_LINES else "")))
        return facts
    if v.status != "wrong" and not v.correct:
        facts.append(("failure", " ".join(" ".join(v.reasons).split())[:MAX_LINE * 2]))
        return facts
    if v.status == "wrong":
        return facts + _mismatch(v.diagnostics.get("mismatch") or {}, v.reasons)
    return facts + _timings(v.speedup, v.speedup_ci, v.diagnostics)


def _mismatch(m: dict[str, Any], reasons: list[str]) -> list[tuple[str, str]]:
    out = [("mismatch", " ".join(" ".join(reasons).split())[:MAX_LINE * 2])]
    if m.get("fraction_wrong") is not None:
        out.append(("elements wrong", f"{100 * m['fraction_wrong']:.4g}%"))
    for key, name in (("first_bad_index", "first wrong element"), ("got", "got there"), ("expected", "expected there"),
                      ("max_abs_error", "largest absolute error"), ("n_nan", "NaN outputs"), ("output", "output index"),
                      ("input_set", "input set")):
        if m.get(key) is not None:
            out.append((name, str(m[key])))
    if m.get("timed"):
        out.append(("when", "in a timed repeat, after passing the first check"))
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} us"


def _timings(speedup: float | None, ci: list[float] | None, d: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if speedup is not None:
        out.append(("speedup", f"{speedup:.4g}x" + (f" (95% CI {ci[0]:.4g}x to {ci[1]:.4g}x)" if ci else "")))
    if d.get("machine_bytes_per_s"):
        out.append(("machine memory bandwidth (measured copy)", f"{d['machine_bytes_per_s'] / 1e9:.4g} GB/s"))
    if isinstance(d.get("call_overhead_us"), (int, float)):
        out.append(("call path overhead per call (allocation, descriptors, call; in every candidate time)", f"{d['call_overhead_us']:.4g} us"))
    if d.get("threads"):
        out.append(("threads a candidate may use", str(d["threads"])))
    if d.get("machine_flops_per_s"):
        out.append(("machine FLOP/s (measured float32 GEMM)", f"{d['machine_flops_per_s'] / 1e9:.4g} GFLOP/s"))
    for name, w in (d.get("workloads") or {}).items():
        cand, ref = w.get("candidate") or {}, w.get("reference") or {}
        if cand.get("median_s") is not None:
            spread = f", IQR {_us(cand['iqr_s'])}" if cand.get("iqr_s") is not None else ""
            out.append((f"{name}: candidate time per call", f"median {_us(cand['median_s'])}{spread} over {cand.get('n', '?')} samples"))
        if ref.get("median_s") is not None:
            spread = f", IQR {_us(ref['iqr_s'])}" if ref.get("iqr_s") is not None else ""
            out.append((f"{name}: reference time per call", f"median {_us(ref['median_s'])}{spread}"))
        if w.get("bytes_per_call"):
            out.append((f"{name}: bytes moved per call (inputs + outputs)", f"{w['bytes_per_call']}"))
        if w.get("achieved_bytes_per_s") is not None and w.get("bandwidth_fraction") is not None:
            out.append((f"{name}: achieved bandwidth", f"{w['achieved_bytes_per_s'] / 1e9:.4g} GB/s = {100 * w['bandwidth_fraction']:.3g}% of the measured roof"))
        if w.get("flops_fraction") is not None:
            out.append((f"{name}: achieved compute", f"{w['achieved_flops_per_s'] / 1e9:.4g} GFLOP/s = {100 * w['flops_fraction']:.3g}% of the measured roof ({w['flops_per_call']} FLOP per call)"))
    for name, value in sorted((d.get("counters") or {}).items()):
        out.append((f"counter {name}", str(value)))
    return out


def render(facts: list[tuple[str, str]]) -> str:
    return "\n".join(f"- {name}: {value}" for name, value in facts)


def has_counters(facts: list[tuple[str, str]]) -> bool:
    return any(name.startswith("counter ") for name, _ in facts)
