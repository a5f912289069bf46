"""The proposal prompt and the parsing of replies.

The request's ``system`` text is the static prefix (task, interface, reference, workloads,
device): identical for every call of one target, so a provider's prompt cache serves it.
The user message carries what changes: the baseline once measured, the observation, and
what to do now (write, improve or fix). The two together stay within ``PromptContext.prompt_tokens``
(``PROMPT_TOKENS`` by default) by leaving out the oldest trajectory lines first; the
best-so-far and the parent are always shown.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..llm.base import LLMRequest, Message
from ..targets.introspect import describe_in_subprocess, describe_spec
from .observation import Observation, build_observation, droppable, fence
from .state import Node, SearchState
from .techniques import DESCRIPTIONS, LOOP, NAMES

if TYPE_CHECKING:
    from .policy import TargetInfo

NATIVE_ABI = """\
Write ONE self-contained {lang_name} translation unit that defines

    #include <dlpack/dlpack.h>
    extern "C" int maxcode_run(const DLTensor* inputs, int32_t n_inputs,
                               DLTensor* outputs, int32_t n_outputs, void* stream);

- `DLTensor` is DLPack's tensor descriptor: `data` (void*), `ndim`, `shape` (int64_t*),
  `strides` (int64_t*, in elements, may be NULL for contiguous), `dtype` ({{code, bits, lanes}}:
  kDLFloat=2, kDLInt=0, kDLUInt=1, kDLBool=6), `byte_offset`, `device`.
- inputs: the reference's positional arguments in order{module_inputs}. Python scalars arrive
  as 0-d tensors (int64, float64 or bool).
- outputs: allocated by the caller, contiguous, with the reference's output shapes and dtypes{outputs_note}.
  Write every element of every output.
- stream: {stream_note}
- Return 0 on success; any other value is reported as a runtime error.
- Do not modify the inputs. No Python, no torch headers, no files, no threads left running.
- Built with: {build}"""

COMPAT = """\
Write ONE Python file that defines {entry} with the same call signature and results as the
reference. It may use torch and build C++/CUDA code with torch.utils.cpp_extension.load_inline.
Do not modify the inputs."""

PROGRAM = """\
Write ONE complete C++17 program, with its own `int main`, that reads the same standard input
and writes the same standard output as the reference, for every valid input.
- Its output must match each test case's expected output: the same lines, tokens equal, or
  numbers within 1e-3 of each other. A non-zero exit status fails the test case.
- Standard library only. No files, no network, no threads left running.
- Built with: {build}"""

PROGRAM_TASK = """\
You are an expert performance engineer. Your job: make the C++ program below faster on the
machine described, while producing the same output. Every candidate is compiled, run on the
program's test cases (each input on stdin, the output compared with the expected one) and
timed interleaved with the original program; only correct candidates count, and the fastest
one wins."""

TASK = """\
You are an expert performance engineer. Your job: make the reference below faster on the
machine described, while computing the same results (within atol/rtol tolerances on every
input set; outputs are compared element by element). Every candidate is compiled, checked on
several seeded input sets and timed interleaved with the reference; only correct candidates
count, and the fastest one wins."""

REPLY = """\
Reply with a short plan (a few lines), then exactly one fenced code block (```{tag}) that
holds the complete file. Nothing after the code block."""

ENTRY = {"native": "maxcode_run"}
LANG_TAGS = {"cpp": ("cpp", "c++", "cxx", "cc", "c"), "cuda": ("cuda", "cu", "cpp", "c++"), "py": ("python", "py", "python3")}
#: the request's prompt (system and user message) in estimated tokens: the trajectory is the
#: part that grows with the search, and the rest (task, reference, inputs, best-so-far and
#: parent code) is a few thousand; 16k leaves an 8k reply room in a 32k-token context, with
#: margin for the estimate
PROMPT_TOKENS = 16_000
#: characters per token of the estimate: code and numbers tokenize at about 3 to 4, so 3
#: over-counts rather than under-counts
CHARS_PER_TOKEN = 3


def estimate_tokens(text: str) -> int:
    """A tokenizer-free upper estimate of a text's tokens (no provider's tokenizer is at hand)."""
    return -(-len(text) // CHARS_PER_TOKEN)


FENCE = re.compile(r"^(?P<ticks>`{3,}|~{3,})[ \t]*(?P<tag>[\w+.-]*)[^\n]*\n(?P<body>.*?)^(?P=ticks)[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass
class PromptContext:
    """Everything about a target a prompt states; built once per target."""

    target_id: str
    kind: str  # "function" | "module" | "program"
    reference_source: str
    fmt: str  # "native" | "compat" | "program"
    lang: str  # "cpp" | "cuda" | "py"
    entry: str  # maxcode_run, ModelNew or the function's name
    workloads: list[dict[str, Any]] = field(default_factory=list)  # name, signature, outputs
    device: dict[str, Any] = field(default_factory=dict)  # name, cores or sms, bytes_per_s
    atol: float | None = None
    rtol: float | None = None
    build: str = ""
    max_tokens: int = 8192
    temperature: float = 1.0
    thinking_tokens: int = 0
    #: what :func:`describe_target` read from the reference (names, roles, layouts, values);
    #: None: the prompt falls back to the workloads' signatures
    inputs: dict[str, Any] | None = None
    #: the bound on a request's prompt, system and user message together (estimated tokens)
    prompt_tokens: int = PROMPT_TOKENS

    def system(self) -> str:
        if self.fmt == "program":
            return self._program_system()
        lang_name = {"cpp": "C++17 (CPU)", "cuda": "CUDA C++17", "py": "Python"}[self.lang]
        if self.fmt == "native":
            iface = NATIVE_ABI.format(
                lang_name=lang_name,
                module_inputs=self._inputs_order(),
                outputs_note=" (a tuple result gives several outputs)",
                stream_note=("the current CUDA stream (cudaStream_t); launch kernels on it" if self.lang == "cuda" else "NULL (CPU code); OpenMP is available"),
                build=self.build or ("nvcc -O3 -std=c++17" if self.lang == "cuda" else "g++ -O3 -march=native -fopenmp -fno-trapping-math -std=c++17"),
            )
        else:
            iface = COMPAT.format(entry=self.entry)
        tol = []
        if self.atol is not None:
            tol.append(f"atol={self.atol:g}")
        if self.rtol is not None:
            tol.append(f"rtol={self.rtol:g}")
        parts = [
            TASK,
            "# Interface\n" + iface,
            f"# Reference ({self.kind} {self.target_id})\n" + fence(self.reference_source, "py"),
            "# Workloads (shapes and dtypes the tests call it with)\n" + self._workloads(),
            *([render_inputs(self.inputs, self.workloads, native=self.fmt == "native")] if self.inputs else []),
            "# Device\n" + self._device(),
        ]
        if tol:
            parts.append("# Tolerance\n" + ", ".join(tol))
        parts.append("# Reply format\n" + REPLY.format(tag={"cpp": "cpp", "cuda": "cuda", "py": "python"}[self.lang]))
        return "\n\n".join(parts)

    def _inputs_order(self) -> str:
        if self.inputs:
            return " (inputs[0], inputs[1], ...), exactly as listed under # Inputs below"
        if self.kind == "module":
            return ", then the module's parameters and buffers in named_parameters() / named_buffers() order"
        return ""

    def _program_system(self) -> str:
        cases = []
        for w in self.workloads:
            cases.append(f"- {w['name']}: {w['signature']}")
            if w.get("preview"):
                cases.append(fence(w["preview"], "text"))
        return "\n\n".join([
            PROGRAM_TASK,
            "# Interface\n" + PROGRAM.format(build=self.build or "g++ -O3 --std=c++17"),
            f"# Reference (program {self.target_id})\n" + fence(self.reference_source, "cpp"),
            "# Test cases (the start of each input)\n" + ("\n".join(cases) or "- (none)"),
            "# Device\n" + self._device(),
            "# Reply format\n" + REPLY.format(tag="cpp"),
        ])

    def _workloads(self) -> str:
        lines = []
        for w in self.workloads:
            outs = w.get("outputs")
            out_text = f" -> outputs {', '.join(f'{d}{s}' for s, d in outs)}" if outs else ""
            lines.append(f"- {w['name']}: {w['signature']}{out_text}")
        return "\n".join(lines) or "- (none recorded)"

    def _device(self) -> str:
        d = self.device
        line = d.get("name", "unknown")
        if d.get("sms"):
            line += f", {d['sms']} SMs"
        if d.get("cores"):
            line += f", {d['cores']} cores"
        if d.get("bytes_per_s"):
            line += f"; measured copy bandwidth {d['bytes_per_s'] / 1e9:.1f} GB/s"
        return line


def _layout(d: dict[str, Any]) -> str:
    text = f"{d['dtype']}, shape [{', '.join(map(str, d['shape']))}], strides [{', '.join(map(str, d['strides']))}]"
    return text + (f", value {d['value']}" if "value" in d else "")


def _contiguous(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def render_inputs(desc: dict[str, Any], workloads: list[dict[str, Any]], native: bool = True) -> str:
    """Every input by position, name and role with its layout per workload, the outputs, and
    the values the reference reads: what a model cannot guess from the source alone."""
    lines = ["# Inputs (in the order the candidate receives them; strides in elements)"]
    for i, item in enumerate(desc.get("inputs") or []):
        if not native and item["role"] in ("parameter", "buffer"):
            continue  # a compat ModelNew holds its own, built like the reference's
        head = f"- inputs[{i}] `{item['name']}` ({item['role']})" if native else f"- `{item['name']}` ({item['role']})"
        per = item.get("workloads")
        if per is None:
            lines.append(f"{head}: {_layout(item['layout'])}")
        elif len({_layout(d) for d in per.values()}) == 1:
            lines.append(f"{head}: {_layout(next(iter(per.values())))}" + (" in every workload" if len(per) > 1 else ""))
        else:
            lines.append(f"{head}: " + "; ".join(f"{w}: {_layout(d)}" for w, d in per.items()))
    outs = [(w["name"], o) for w in workloads for o in [w.get("outputs")] if o]
    if outs:
        lines.append("# Outputs (allocated by the caller, contiguous)")
        for j in range(max(len(o) for _, o in outs)):
            per = [(name, o[j]) for name, o in outs if j < len(o)]
            spelled = {name: f"{dtype}, shape [{', '.join(map(str, shape))}], strides [{', '.join(map(str, _contiguous(shape)))}]"
                       for name, (shape, dtype) in per}
            text = next(iter(spelled.values())) if len(set(spelled.values())) == 1 else "; ".join(f"{n}: {t}" for n, t in spelled.items())
            lines.append(f"- outputs[{j}]: {text}" if native else f"- result {j}: {text}")
    values = [f"{name} = {value}" for name, value in desc.get("attributes") or []]
    values += [f"{name} = {value}" + ("" if value.startswith("...  # ") else "  # module-level") for name, value in desc.get("globals") or []]
    if desc.get("constructor"):
        values.insert(0, f"# built as {desc['constructor']}")
    if values:
        lines.append("# Values the reference reads (from the instance and its module)\n" + fence("\n".join(values), "py"))
    return "\n".join(lines)


def describe_target_early(target: TargetInfo, workloads: list[dict[str, Any]], root: Path) -> Callable[[], dict[str, Any] | None]:
    """:func:`describe_target`, its child process started now and read when called: the child's
    torch import (1.3 s on the 2-core VM) then overlaps the oracle's start instead of following
    it. Where the description is read in this process, nothing starts early."""
    if not _described_in_a_child(target, workloads):
        return lambda: describe_target(target, workloads, root)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maxcode-describe")
    future = pool.submit(describe_target, target, workloads, root)
    pool.shutdown(wait=False)
    return future.result


def _described_in_a_child(target: TargetInfo, workloads: list[dict[str, Any]]) -> bool:
    """Whether :func:`describe_target` starts a child process: a target with captured workloads
    whose module this process has not imported (a KernelBench problem never is)."""
    return target.kind != "program" and bool(workloads) and (target.problem or target.module not in sys.modules)


def describe_target(target: TargetInfo, workloads: list[dict[str, Any]], root: Path) -> dict[str, Any] | None:
    """:func:`~pytest_maxcode.targets.introspect.describe_spec` for a marked target or a
    KernelBench problem; None (the prompt says less) when it fails. A marked target whose module
    this process has already imported (the tests that called it did) is read here, as the
    dispatcher reads it; anything else in a child process, so that no code runs here that had
    not (a KernelBench problem's module, never imported by the search), at ~3 s for the child's
    torch import."""
    if target.kind == "program" or not workloads:
        return None
    captured = [[w["name"], w["captured"]] for w in workloads if w.get("captured")]
    instance = Path(captured[0][1]).parent / "module.pt" if captured else None
    spec = {"kind": target.kind, "path": str(target.source_file), "qualname": target.qualname, "rootdir": str(root),
            "module": None if target.problem else target.module, "captured": captured,
            "instance": str(instance) if instance is not None and instance.exists() and not target.problem else None}
    if not _described_in_a_child(target, workloads):
        try:
            # nothing added to this process's sys.path; JSON's shapes, as the child's are
            return json.loads(json.dumps(describe_spec({**spec, "rootdir": None})))
        except Exception:  # noqa: BLE001 - the user's module, read as the child would: a failure says less, never stops
            return None
    try:
        return describe_in_subprocess(spec)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
        return None


INSTRUCTIONS = {
    "initial": "Write a first implementation that is faster than the reference.",
    "improve": "Write a faster version of candidate #{i}: keep it correct, change what limits its speed.",
    "fix": "Candidate #{i} failed ({status}). Fix the cause stated above, and keep it fast.",
}


def permitted_block(permitted: tuple[str, ...]) -> str:
    """What a stage of a staged schedule allows, and what it does not."""
    allowed = [LOOP] + [t for t in NAMES if t in permitted and t != LOOP]
    barred = [t for t in NAMES if t not in allowed]
    lines = ["## Techniques permitted in this stage", "Use only:"] + [f"- {t}: {DESCRIPTIONS[t]}" for t in allowed]
    if barred:
        lines += ["Not permitted now (a candidate that uses one is not evaluated):"] + [f"- {t}: {DESCRIPTIONS[t]}" for t in barred]
    return "\n".join(lines)


def user_message(ctx: PromptContext, state: SearchState, parent: Node | None, mode: str, parts: tuple[str, ...],
                 permitted: tuple[str, ...] | None = None) -> str:
    """What changes between requests. Over the prompt's token budget, the oldest trajectory
    lines are left out first, as few as bring it under (the best-so-far's and the parent's
    stay); what else it holds is never cut, so a prompt may still be over when nothing is left
    to drop."""

    def with_drop(drop: int) -> str:
        """The message with the ``drop`` oldest droppable trajectory lines left out."""
        return _compose(ctx, state, parent, mode, permitted, build_observation(state, parts, parent, drop))

    text = with_drop(0)
    if "trajectory" not in parts or not state.trajectory:
        return text
    room = ctx.prompt_tokens - estimate_tokens(ctx.system())
    if estimate_tokens(text) <= room:
        return text
    pinned = {n.index for n in (parent, state.best) if n is not None}
    lo, hi = 1, len(droppable(state, pinned))  # the fewest lines to drop: the smallest that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate_tokens(with_drop(mid)) <= room:
            hi = mid
        else:
            lo = mid + 1
    return with_drop(hi)


def _compose(ctx: PromptContext, state: SearchState, parent: Node | None, mode: str, permitted: tuple[str, ...] | None,
             obs: Observation) -> str:
    """The message around an observation already cut to fit: the baseline, the observation, the
    parent's code where the observation does not show it, the permitted techniques, the task."""
    blocks = []
    if state.baseline_s and ctx.fmt == "program":
        blocks.append(f"## Baseline\nThe reference takes {state.baseline_s * 1e3:.2f} ms per test case (median, geometric mean over the test cases).")
    elif state.baseline_s:
        blocks.append(f"## Baseline\nThe reference takes {state.baseline_s * 1e6:.1f} us per call (median over the workloads).")
    else:
        blocks.append("## Baseline\nNot measured yet: the first correct candidate's run measures the reference.")
    if obs.sections:
        blocks.append(obs.text())
    if parent is None:
        mode = "initial"
    instruction = INSTRUCTIONS[mode].format(i=parent.index if parent else "", status=parent.verdict.status if parent else "")
    if parent is not None and parent.index not in obs.shown:
        lang = parent.proposal.spec.lang if parent.proposal.spec else ctx.lang
        code = fence(parent.code, lang) if parent.code is not None else "(it had no code)"
        blocks.append(f"## Candidate #{parent.index}\n{code}")
    if permitted is not None:
        blocks.append(permitted_block(permitted))
    blocks.append("## Your task now\n" + instruction)
    return "\n\n".join(blocks)


def build_request(ctx: PromptContext, state: SearchState, parent: Node | None, mode: str, parts: tuple[str, ...], sample: int,
                  permitted: tuple[str, ...] | None = None) -> LLMRequest:
    """The request for one ask. Seven parameters because it takes the target's context, the
    state, and the ask as the policy resolved it (parent, mode, observation parts, sample
    number, permitted techniques), and tests call it with them one by one."""
    return LLMRequest(
        system=ctx.system(),
        messages=(Message("user", user_message(ctx, state, parent, mode, parts, permitted)),),
        max_tokens=ctx.max_tokens,
        temperature=ctx.temperature,
        thinking_tokens=ctx.thinking_tokens,
        sample=sample,
    )


def parse_reply(text: str, fmt: str, lang: str, entry: str) -> tuple[str | None, str | None]:
    """(code, None) or (None, why the reply has no usable code): a ``format`` failure."""
    blocks = [(m.group("tag").lower(), m.group("body")) for m in FENCE.finditer(text)]
    if not blocks:
        opened = re.search(r"^(`{3,}|~{3,})", text, re.MULTILINE)
        if opened:
            return None, "the reply's code block is not closed (cut off at max_tokens?)"
        return None, "the reply has no fenced code block"
    wanted = LANG_TAGS[lang]
    usable = [body for tag, body in blocks if tag in wanted or not tag]
    if not usable:
        tags = ", ".join(sorted({t for t, _ in blocks}))
        return None, f"the reply's code blocks are {tags}, not {wanted[0]}"
    with_entry = [b for b in usable if re.search(rf"\b{re.escape(entry)}\b", b)]
    if not with_entry:
        return None, f"the reply's code defines no {entry}"
    return max(with_entry, key=len).rstrip() + "\n", None


def target_reference_text(target: TargetInfo) -> str:
    """What a prompt shows as the reference: a program's whole source, or a Python target's definition."""
    if target.kind == "program":
        return target.source_file.read_text(errors="replace")
    return reference_text(target.source_file, target.qualname)


def reference_text(path: Path, qualname: str) -> str:
    """The reference as the user wrote it (docstring and comments help a model), without its
    decorator, after the module's imports (the names it uses)."""
    source = path.read_text()
    tree = ast.parse(source)
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise ValueError(f"{path}: no {qualname}")
        body = node.body
    lines = source.splitlines()
    segment = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    imports = [ast.get_source_segment(source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports = [i for i in imports if i and "pytest_maxcode" not in i]
    return "\n".join(imports) + ("\n\n\n" if imports else "") + segment
