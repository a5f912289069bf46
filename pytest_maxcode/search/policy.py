"""The built-in policy: real candidates without any LLM.

It proposes, in order, the kernel ``maxcode.lock`` accepts for the target (the merged kernel
is the starting point: the search measures it again and builds on it), the user's hand-written
seed kernels from ``maxcode_kernels/seeds/<target-id>/`` (each expanded over its declared tunable
parameters) and ``torch.compile`` variants of the reference as compat candidates; for a
program target, the seeds and then rewrites of the program itself (``program_variants``).

A seed declares parameters on one line, anywhere in the file::

    // maxcode-tune: BLOCK=64,128,256 UNROLL=1,2,4      (C++ / CUDA: each becomes a #define)
    # maxcode-tune: CHUNK=1024,4096                      (Python: each becomes a module constant)
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from .._files import write_atomic
from ..model.candidate import NATIVE_EXTS, CandidateSpec
from ..targets.lock import find_lock, read_lock
from .program_variants import program_variants
from .state import Proposal, SearchState
from .strategy import Ask, Proposer

TUNE = re.compile(r"^\s*(?://|#)\s*maxcode-tune:\s*(?P<spec>.+)$", re.MULTILINE)


@dataclass
class TargetInfo:
    """What the search needs to know about a marked target (picklable, no live objects)."""

    id: str
    module: str
    qualname: str
    source_file: Path
    kind: str
    lang: str = "auto"
    atol: float | None = None
    rtol: float | None = None
    min_speedup: float | None = None
    budget: int | None = None
    inplace: bool = False
    #: a KernelBench problem: its Model is built from get_init_inputs() under a seed, so a
    #: compat ModelNew built the same way has the same weights (and may subclass it)
    problem: bool = False


def parse_tunables(text: str) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for m in TUNE.finditer(text):
        for item in m.group("spec").split():
            name, _, values = item.partition("=")
            if not name.isidentifier() or not values:
                raise ValueError(f"maxcode-tune: {item!r} is not NAME=V1,V2,...")
            params[name] = [v for v in values.split(",") if v]
    return params


def expand(text: str, ext: str) -> list[tuple[str, dict[str, str]]]:
    """One source per configuration of the declared parameters (the seed itself if none)."""
    params = parse_tunables(text)
    if not params:
        return [(text, {})]
    names = sorted(params)
    out = []
    for values in itertools.product(*(params[n] for n in names)):
        config = dict(zip(names, values))
        if ext == ".py":
            header = "".join(f"{n} = {v}\n" for n, v in config.items())
        else:
            header = "".join(f"#define {n} {v}\n" for n, v in config.items())
        out.append((header + text, config))
    return out


@dataclass(frozen=True)
class CompileVariant:
    """One ``torch.compile`` configuration of the reference, proposed as its own candidate."""

    name: str  # the candidate's origin reads ``torch.compile:<name>``
    mode: str = "default"
    fullgraph: bool = False
    #: inductor settings on top of the mode's (``torch._inductor.config`` names)
    options: tuple[tuple[str, object], ...] = ()

    def call_args(self) -> str:
        """The keyword arguments of the generated ``torch.compile`` call."""
        head = f"dynamic=False, fullgraph={self.fullgraph!r}"
        if not self.options:
            return f"{head}, mode={self.mode!r}"
        # torch.compile takes a mode or options, not both: the mode's own options come first
        return f"{head}, options={{**torch._inductor.list_mode_options({self.mode!r}), **{dict(self.options)!r}}}"


DEFAULT = CompileVariant("default")
#: weights become constants: folded, and on CPU prepacked for oneDNN (inference modules only)
FREEZING: tuple[tuple[str, object], ...] = (("freezing", True),)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def compile_variants(kind: str, device: str, cpu_flags: set[str] | None = None) -> list[CompileVariant]:
    """The ``torch.compile`` configurations worth a compile on this device, most likely useful
    first and at most four (each compile costs tens of seconds on a small CPU). CUDA graphs only
    on a GPU; freezing only for a module (a function has no weights to fold); a narrower vector
    width only where inductor's default is AVX-512, whose clock penalty can make 256 bits win."""
    module = kind == "module"
    freeze = FREEZING if module else ()
    if device == "cuda":
        out = [DEFAULT,
               # one CUDA graph replays the whole call: a graph break would split it, so none is allowed
               CompileVariant("reduce-overhead", "reduce-overhead", fullgraph=True),
               CompileVariant("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs")]
        if module:
            out.append(CompileVariant("freezing", options=FREEZING))
        return out
    out = [DEFAULT]
    if module:
        out.append(CompileVariant("freezing", options=FREEZING))
    # on CPU, max-autotune tries inductor's C++ GEMM templates, which pack frozen weights
    out.append(CompileVariant("max-autotune-no-cudagraphs" + ("+freezing" if module else ""), "max-autotune-no-cudagraphs",
                              options=freeze))
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    if "avx512f" in flags:
        out.append(CompileVariant("simdlen=256" + ("+freezing" if module else ""), options=(("cpp.simdlen", 256),) + freeze))
    return out


COMPILE_TEMPLATE = '''"""maxcode built-in candidate: torch.compile ({variant}) of {target_id}."""

import importlib

import torch

_obj = importlib.import_module({module!r})
for _part in {qualname!r}.split("."):
    _obj = getattr(_obj, _part)

{name} = torch.compile(getattr(_obj, "__wrapped__", _obj), {args})
'''


COMPILE_MODULE_TEMPLATE = '''"""maxcode built-in candidate: torch.compile ({variant}) of {target_id}."""

import importlib
import types

import torch

_cls = importlib.import_module({module!r})
for _part in {qualname!r}.split("."):
    _cls = getattr(_cls, _part)
# the reference's own forward: the decorated one would dispatch back to this kernel
_forward = getattr(_cls.forward, "__wrapped__", _cls.forward)


class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self._maxcode_wrap(_cls(*args, **kwargs))

    @classmethod
    def maxcode_from(cls, instance):
        """Around the reference's own instance (the live one at run time, a copy of the
        captured one in the oracle): its weights and its constructor's arguments."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new._maxcode_wrap(instance)
        return new

    def _maxcode_wrap(self, inner):
        self.inner = inner
        self._maxcode_compiled = torch.compile(types.MethodType(_forward, inner), {args})

    def forward(self, *args):
        return self._maxcode_compiled(*args)
'''


def compile_candidate_text(target_id: str, module: str, qualname: str, kind: str, variant: CompileVariant | str) -> str:
    """A compat candidate that is ``torch.compile`` of the reference: the field's second baseline
    (``variant`` a :class:`CompileVariant` or a plain mode)."""
    v = variant if isinstance(variant, CompileVariant) else CompileVariant(variant, variant)
    fields = {"variant": v.name, "target_id": target_id, "module": module, "qualname": qualname, "args": v.call_args()}
    if kind == "module":
        return COMPILE_MODULE_TEMPLATE.format(**fields)
    return COMPILE_TEMPLATE.format(**fields, name=qualname.split(".")[-1])


EXT = {"cpp": ".cpp", "cuda": ".cu", "py": ".py"}


def materialize(out_dir: Path, text: str, lang: str, stem: str, fmt: str | None = None) -> CandidateSpec:
    """A candidate's file, named by its content so equal sources share one file. ``fmt`` is
    "program" for a whole C++ program; else the language decides (Python: compat, else native)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = out_dir / f"{stem}-{digest}{EXT[lang]}"
    if not path.exists():
        write_atomic(path, text)  # targets searched in threads may write the same candidate at once
    return CandidateSpec(path, fmt or ("compat" if lang == "py" else "native"), lang, text)


def candidates_dir(root: Path, target_id: str) -> Path:
    return root / ".maxcode" / "candidates" / target_id


class BuiltinPolicy:
    """A proposer that ignores what it is asked to build on: its candidates are a fixed list."""

    name = "builtin"

    def __init__(self, target: TargetInfo, root: Path, device: str, torch_compile: bool = True) -> None:
        self.target = target
        self.root = root
        self.device = device
        self.torch_compile = torch_compile
        self.out_dir = candidates_dir(root, target.id)
        self._queue: list[Proposal] | None = None

    def pending(self) -> list[Proposal]:
        """What is still to propose (seeds expanded and written once, on first use)."""
        if self._queue is None:
            self._queue = self.proposals()
        return self._queue

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        queue = self.pending()
        take, self._queue = queue[: len(asks)], queue[len(asks) :]
        return take

    def _wanted(self, lang: str) -> bool:
        if self.target.lang == "cpp":
            return lang == "cpp"
        if self.target.lang == "cuda":
            return lang == "cuda"
        return lang == ("cuda" if self.device == "cuda" else "cpp")

    def accepted(self) -> Proposal | None:
        """The kernel the project's lock accepts for this target, as the first candidate (as it is:
        its tunable parameters were already chosen), or None where there is none in this language."""
        lock = find_lock(self.root)
        try:
            entry = read_lock(lock).get(self.target.id) if lock else None
        except ValueError:
            return None  # a broken lock is reported where it is used; the search goes on without it
        if entry is None or self.target.kind == "program" or not self._wanted(entry.lang) and entry.lang != "py":
            return None
        try:
            text = (lock.parent / entry.kernel).read_text()  # type: ignore[union-attr]
        except OSError:
            return None
        spec = materialize(self.out_dir, text, entry.lang, "accepted")
        return Proposal(spec, f"accepted:{entry.kernel}", {})

    def _compilable(self) -> bool:
        """Whether a compiled copy of the reference can stand in for it: a function, or a module
        (a KernelBench problem's Model is rebuilt from get_init_inputs() under the oracle's
        seed; a module marked in a project is wrapped by ``ModelNew.maxcode_from``, around the
        live instance at run time and a copy of the captured one in the oracle)."""
        return self.target.kind in ("function", "module")

    def proposals(self) -> list[Proposal]:
        first = self.accepted()
        out: list[Proposal] = [first] if first else []
        seeds = self.root / "maxcode_kernels" / "seeds" / self.target.id
        program = self.target.kind == "program"
        if seeds.is_dir():
            for seed in sorted(seeds.iterdir()):
                ext = seed.suffix.lower()
                if ext in NATIVE_EXTS:
                    lang = NATIVE_EXTS[ext]
                    if not self._wanted(lang):
                        continue
                elif ext == ".py":
                    lang = "py"
                else:
                    continue
                for text, params in expand(seed.read_text(), ext):
                    spec = materialize(self.out_dir, text, lang, seed.stem, "program" if program else None)
                    out.append(Proposal(spec, f"seed:{seed.name}", params))
        if program:
            for stem, text, params in program_variants(self.target.source_file.read_text(errors="replace")):
                out.append(Proposal(materialize(self.out_dir, text, "cpp", stem, "program"), f"rewrite:{stem}", params))
        if self.torch_compile and self._compilable():
            for variant in compile_variants(self.target.kind, self.device):
                text = compile_candidate_text(self.target.id, self.target.module, self.target.qualname, self.target.kind, variant)
                spec = materialize(self.out_dir, text, "py", "compile-" + re.sub(r"[^A-Za-z0-9]+", "-", variant.name))
                out.append(Proposal(spec, f"torch.compile:{variant.name}", {"variant": variant.name}))
        return out


def has_seeds(root: Path, target_id: str) -> bool:
    """Whether the project holds hand-written seed kernels for this target."""
    seeds = root / "maxcode_kernels" / "seeds" / target_id
    return seeds.is_dir() and any(p.is_file() for p in seeds.iterdir())


WITHOUT_MODEL = ("maxcode: the built-in search ran without a model or seed kernels; a model (--maxcode-llm "
                 "anthropic:MODEL or openai:MODEL@URL) would write and refine new kernels for each target, and a seed "
                 "kernel in maxcode_kernels/seeds/<target-id>/ would be measured over its tunable parameters")


def without_model_note(root: Path, policy: str, searched: list[str]) -> str | None:
    """The run's last word on what it left out: only after a built-in search with no seeds."""
    if policy != "builtin" or not searched or any(has_seeds(root, t) for t in searched):
        return None
    return WITHOUT_MODEL


class AcceptedFirst:
    """A model's policy, after the kernel the project's lock accepts for the target.

    The merged kernel is the search's starting point: measured again as the first node, it is
    in the trajectory and (while nothing beats it) the best-so-far every later prompt improves
    on, instead of the model starting over from the reference.
    """

    def __init__(self, inner: Proposer, accepted: Proposal) -> None:
        self.inner, self.name = inner, inner.name
        self._accepted: Proposal | None = accepted

    @property
    def wait_s(self) -> float:
        return float(getattr(self.inner, "wait_s", 0.0))

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        if self._accepted is not None and asks:
            first, self._accepted = self._accepted, None
            return [first]
        return self.inner.propose(state, asks)
