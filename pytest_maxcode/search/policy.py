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
from ..oracle.check import NATIVE_EXTS, CandidateSpec
from ..targets.lock import find_lock, read_lock
from .program_variants import program_variants
from .state import Proposal, SearchState
from .strategy import Ask

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


COMPILE_TEMPLATE = '''"""maxcode built-in candidate: torch.compile(mode={mode!r}) of {target_id}."""

import importlib

import torch

_obj = importlib.import_module({module!r})
for _part in {qualname!r}.split("."):
    _obj = getattr(_obj, _part)

{name} = torch.compile(getattr(_obj, "__wrapped__", _obj), mode={mode!r}, dynamic=False)
'''


COMPILE_MODULE_TEMPLATE = '''"""maxcode built-in candidate: torch.compile(mode={mode!r}) of {target_id}."""

import importlib

import torch

_cls = importlib.import_module({module!r})
for _part in {qualname!r}.split("."):
    _cls = getattr(_cls, _part)


class ModelNew(_cls):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._maxcode_compiled = torch.compile(super().forward, mode={mode!r}, dynamic=False)

    def forward(self, *args):
        return self._maxcode_compiled(*args)
'''


def compile_candidate_text(target_id: str, module: str, qualname: str, kind: str, mode: str) -> str:
    """A compat candidate that is ``torch.compile`` of the reference: the field's second baseline."""
    if kind == "module":
        return COMPILE_MODULE_TEMPLATE.format(mode=mode, target_id=target_id, module=module, qualname=qualname)
    return COMPILE_TEMPLATE.format(mode=mode, target_id=target_id, module=module, qualname=qualname, name=qualname.split(".")[-1])


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
        # an nn.Module captured from tests has trained or random weights a ModelNew cannot rebuild;
        # a KernelBench problem's are rebuilt from get_init_inputs() under the same seed
        if (self.target.kind == "function" or self.target.problem) and self.torch_compile:
            modes = ["default"] + (["max-autotune-no-cudagraphs"] if self.device == "cuda" else [])
            for mode in modes:
                text = compile_candidate_text(self.target.id, self.target.module, self.target.qualname, self.target.kind, mode)
                spec = materialize(self.out_dir, text, "py", f"compile-{mode}")
                out.append(Proposal(spec, f"torch.compile:{mode}", {"mode": mode}))
        return out
