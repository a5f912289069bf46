"""Observation builders: what of the search so far goes into the next prompt.

Switchable, to reproduce the max-reward paper's ablation. The parts:

- ``feedback``: the last attempt only (the node being built on, else the latest one),
  with its code and the oracle's verdict;
- ``trajectory``: every attempt so far, one line each (parent, status, speedup, reason); a
  source sampled several times is one line with its count, and a prompt over its token budget
  leaves out the oldest lines first (``drop``), never the best-so-far's or the parent's;
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
__all__ = ["HEADERS", "PARTS", "Observation", "build_observation", "droppable", "fence", "parse_observation", "trajectory_line",
           "verdict_lines"]
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


def _samples(node: Node) -> str:
    return f", sampled {node.samples} times" if node.samples > 1 else ""


def _describe(node: Node, title: str) -> str:
    parent = f", built on #{node.parent.index}" if node.parent is not None else ""
    return "\n".join([f"{title}: candidate #{node.index} ({node.proposal.mode}{parent}{_samples(node)})", *verdict_lines(node), _code_block(node)])


def trajectory_line(n: Node) -> str:
    """One attempt in the trajectory: parent, status, speedup, samples, first reason."""
    sp = f" {n.verdict.speedup:.3g}x" if n.verdict.correct and n.verdict.speedup is not None else ""
    parent = f" from #{n.parent.index}" if n.parent is not None else " from the reference"
    count = f" (sampled {n.samples} times)" if n.samples > 1 else ""
    why = (n.proposal.error or (n.verdict.reasons[0] if n.verdict.reasons else ""))[:160]
    return f"#{n.index}{parent}: {n.verdict.status}{sp}{count}" + (f" - {why}" if why else "")


def _unpinned(state: SearchState, pinned: set[int] | frozenset[int]) -> list[Node]:
    return [n for n in state.trajectory if n.index not in pinned]


def droppable(state: SearchState, pinned: set[int] | frozenset[int]) -> list[int]:
    """The listed attempts a prompt over budget may leave out, oldest first: those past the
    ``TRAJECTORY_LINES`` cap are out already, and the pinned ones (the best-so-far and the
    parent) stay."""
    return [n.index for n in _unpinned(state, pinned)[max(0, len(state.trajectory) - TRAJECTORY_LINES):]]


def _trajectory(state: SearchState, drop: int = 0, pinned: frozenset[int] = frozenset()) -> str:
    nodes = state.trajectory
    samples = sum(n.samples for n in nodes)
    lines = [f"{len(nodes)} attempt(s) so far, oldest first" + (f" ({samples} samples; a repeated source is listed once)" if samples > len(nodes) else "") + ":"]
    # the oldest unpinned lines go first: past the cap, then as many as the token budget wants
    left_out = {n.index for n in _unpinned(state, pinned)[: max(0, len(nodes) - TRAJECTORY_LINES) + drop]}
    if left_out:
        lines.append(f"({len(left_out)} older attempt(s) not listed)")
    lines += [trajectory_line(n) for n in nodes if n.index not in left_out]
    return "\n".join(lines)


def build_observation(state: SearchState, parts: tuple[str, ...], parent: Node | None, drop: int = 0) -> Observation:
    """The parts, in a fixed order; ``drop``: how many of the oldest droppable trajectory
    lines to leave out (the prompt's token budget decides, in ``prompts.user_message``)."""
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
            pinned = frozenset(n.index for n in (parent, best) if n is not None)
            sections.append((part, f"{HEADERS[part]}\n{_trajectory(state, drop, pinned)}"))
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
