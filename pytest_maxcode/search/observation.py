"""Observation builders: what of the search so far goes into the next prompt.

Switchable, to reproduce the max-reward paper's ablation. The parts:

- ``feedback``: the last attempt only (the node being built on, else the latest one),
  with its code and the oracle's verdict;
- ``trajectory``: every attempt so far, one line each (parent, status, speedup, reason);
- ``best``: the best-so-far candidate, its code and its feedback;
- ``critique``: the critic's diagnosis of the nodes shown (filled by a critic; empty
  until one has run).

A setting combines parts with ``+``: ``"trajectory+critique+best"`` is the full method.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tables import (  # re-exported: the setting's parser sits at the bottom layer
    PARTS,
    parse_observation,
)
from .state import Node, SearchState

HEADERS = {
    "feedback": "## Last attempt",
    "trajectory": "## Trajectory",
    "best": "## Best so far",
    "critique": "## Critique",
}
__all__ = ["HEADERS", "PARTS", "Observation", "build_observation", "fence", "parse_observation", "verdict_lines"]
TRAJECTORY_LINES = 40  # older attempts are summarised in one line


@dataclass
class Observation:
    sections: list[tuple[str, str]]  # (part, text)
    shown: set[int]  # node indices whose code is in the text

    def text(self) -> str:
        return "\n\n".join(t for _, t in self.sections)


def fence(code: str, lang: str) -> str:
    tag = {"cpp": "cpp", "cuda": "cuda", "py": "python"}.get(lang, "")
    return f"```{tag}\n{code.rstrip()}\n```"


def verdict_lines(node: Node) -> list[str]:
    """The oracle's facts about one attempt, as the model should read them."""
    v = node.verdict
    out = [f"status: {v.status}" + (f" (reward {node.reward:.3g})" if node.reward is not None else "")]
    if node.proposal.error:
        out.append(f"problem: {node.proposal.error}")
    if v.correct and v.speedup is not None:
        ci = f", 95% interval [{v.speedup_ci[0]:.3g}, {v.speedup_ci[1]:.3g}]" if v.speedup_ci else ""
        out.append(f"speedup over the reference: {v.speedup:.3g}x{ci}")
        if v.candidate_s and v.reference_s:
            out.append(f"median time: {v.candidate_s * 1e6:.1f} us (reference {v.reference_s * 1e6:.1f} us)")
        overhead = v.diagnostics.get("call_overhead_us")
        if isinstance(overhead, (int, float)):
            out.append(f"of which the call path (allocation, descriptors, call) takes about {overhead:.2g} us per call")
        for name, d in sorted(v.diagnostics.get("workloads", {}).items()):
            frac = d.get("bandwidth_fraction")
            if frac is not None:
                out.append(f"workload {name}: {d.get('speedup', 0):.3g}x, {100 * frac:.0f}% of the measured memory bandwidth")
    for r in v.reasons[:6]:
        out.append(f"- {r[:600]}")
    if v.weak_check:
        out.append("note: the check is weak for this target (outputs that are easy to fake)")
    return out


def _code_block(node: Node) -> str:
    code = node.code
    if code is None:
        return "(no code: the reply had no usable code block)"
    return fence(code, node.proposal.spec.lang if node.proposal.spec else "")


def _describe(node: Node, title: str) -> str:
    parent = f", built on #{node.parent.index}" if node.parent is not None else ""
    return "\n".join([f"{title}: candidate #{node.index} ({node.proposal.mode}{parent})", *verdict_lines(node), _code_block(node)])


def _trajectory(state: SearchState) -> str:
    nodes = state.trajectory
    lines = [f"{len(nodes)} attempt(s) so far, oldest first:"]
    skipped = max(0, len(nodes) - TRAJECTORY_LINES)
    if skipped:
        lines.append(f"(#0-#{skipped - 1} not listed)")
    for n in nodes[skipped:]:
        sp = f" {n.verdict.speedup:.3g}x" if n.verdict.correct and n.verdict.speedup is not None else ""
        parent = f" from #{n.parent.index}" if n.parent is not None else " from the reference"
        why = (n.proposal.error or (n.verdict.reasons[0] if n.verdict.reasons else ""))[:160]
        lines.append(f"#{n.index}{parent}: {n.verdict.status}{sp}" + (f" - {why}" if why else ""))
    return "\n".join(lines)


def build_observation(state: SearchState, parts: tuple[str, ...], parent: Node | None) -> Observation:
    sections: list[tuple[str, str]] = []
    shown: set[int] = set()
    if not state.trajectory:
        return Observation(sections, shown)
    last = parent if parent is not None else state.trajectory[-1]
    best = state.best
    for part in PARTS:  # a fixed order, whatever order the setting names them in
        if part not in parts:
            continue
        if part == "feedback":
            sections.append((part, f"{HEADERS[part]}\n{_describe(last, 'Last attempt')}"))
            shown.add(last.index)
        elif part == "trajectory":
            sections.append((part, f"{HEADERS[part]}\n{_trajectory(state)}"))
        elif part == "best" and best is not None:
            if best.index in shown:
                text = f"Best so far: candidate #{best.index}, shown above."
            else:
                text = _describe(best, "Best so far")
                shown.add(best.index)
            sections.append((part, f"{HEADERS[part]}\n{text}"))
        elif part == "critique":
            seen = {n.index: n for n in (last, best) if n is not None}
            notes = [(n, n.critique) for n in seen.values() if n.critique]
            if notes:
                sections.append((part, HEADERS[part] + "\n" + "\n".join(f"On #{n.index}: {c}" for n, c in notes)))
    return Observation(sections, shown)
