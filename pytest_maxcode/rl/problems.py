"""What a dataset row's ``problem`` names: a KernelBench problem file or a captured target.

A row carries a plain string (datasets hold strings, not objects), and the reward turns it
back into everything an oracle needs. KernelBench problems are whole files (``Model``,
``get_inputs``, ``get_init_inputs``); captured targets are the functions and modules a
``pytest --maxcode`` run recorded under ``.maxcode/inputs/<target>/``. Both are read with
``ast`` only: their code runs in the oracle's workers, never in the trainer's process.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import MaxcodeError
from ..oracle.reference import ReferenceSpec, parse_reference
from ..search.prompts import reference_text
from ..store.sqlite import default_path
from ..targets.decorator import normalized_source_in_file

_LEVEL = re.compile(r"^level(\d+)$")


@dataclass(frozen=True)
class RLProblem:
    """One problem as the reward evaluates it: the reference and the workloads to check on."""

    id: str
    reference: ReferenceSpec
    #: the source a prompt shows: the whole file for KernelBench, the target's code otherwise
    source: str
    #: captured workloads ({"name", "captured"}); None: the reference's own get_inputs()
    workloads: tuple[dict[str, Any], ...] | None = None
    atol: float | None = None
    rtol: float | None = None
    signatures: tuple[str, ...] = ()  # the captured workloads' input signatures

    @property
    def kind(self) -> str:
        return self.reference.kind

    def entry(self, fmt: str) -> str:
        """What a candidate must define: the ABI's symbol, or the compat file's replacement."""
        if fmt == "native":
            return "maxcode_run"
        return "ModelNew" if self.kind == "module" else self.reference.name.split(".")[-1]


def kernelbench_id(path: Path) -> str:
    """``L1/3_Name`` for ``.../level1/3_Name.py`` (as ``bench.problems.Problem.id``), else the stem."""
    m = _LEVEL.match(path.parent.name)
    return f"L{m.group(1)}/{path.stem}" if m else path.stem


def problem_id(problem: Any) -> str:
    """The key a curriculum and the oracle cache use for whatever a row's ``problem`` holds."""
    if isinstance(problem, RLProblem):
        return problem.id
    text = str(problem)
    if text.endswith(".py"):
        return kernelbench_id(Path(text))
    return text


def cache_key(problem: Any) -> str:
    """What tells problems apart for caching: the file itself (two scales of one KernelBench
    problem share an id, and a curriculum's progress, but not their oracles)."""
    if isinstance(problem, RLProblem):
        return str(problem.reference.path) if problem.workloads is None else problem.id
    text = str(problem)
    return str(Path(text).resolve()) if text.endswith(".py") else text


def kernelbench_problem(path: str | Path) -> RLProblem:
    p = Path(path).resolve()
    reference = parse_reference(str(p))
    return RLProblem(kernelbench_id(p), reference, p.read_text())


def resolve(problem: Any, root: Path) -> RLProblem:
    """A row's ``problem``: an RLProblem, a KernelBench file, or a target id captured under ``root``."""
    if isinstance(problem, RLProblem):
        return problem
    text = str(problem)
    if text.endswith(".py") and Path(text).is_file():
        return kernelbench_problem(text)
    if (root / ".maxcode" / "inputs" / text).is_dir():
        return target_problem(root, text)
    raise MaxcodeError(
        f"problem {text!r}: neither a KernelBench problem file nor a target captured under {root / '.maxcode' / 'inputs'}"
    )


def captured_files(root: Path, target_id: str) -> list[Path]:
    """The target's workload files (``module.pt`` is the captured instance, not a workload)."""
    d = root / ".maxcode" / "inputs" / target_id
    return sorted(p for p in d.glob("*.pt") if p.name != "module.pt")


def target_problem(root: Path, target_id: str) -> RLProblem:
    """A captured target, located through the store (where a run recorded its source file)
    or, failing that, through the module path under ``root`` or ``root/src``."""
    files = captured_files(root, target_id)
    if not files:
        raise MaxcodeError(f"target {target_id}: no captured inputs under {root / '.maxcode' / 'inputs' / target_id}")
    kind, source_file = _from_store(root, target_id)
    for module, qualname in _splits(target_id):
        path = source_file or _module_file(root, module)
        if path is None or not _module_matches(module, path):
            continue
        node = normalized_source_in_file(path, qualname)
        if node is None:
            continue
        kind = kind or ("module" if node.startswith("class ") else "function")
        instance = files[0].parent / "module.pt" if kind == "module" else None
        reference = ReferenceSpec(kind, path, qualname, module=module, rootdir=root, instance=instance)
        signatures = tuple(str(torch.load(f, weights_only=True)["signature"]) for f in files)
        return RLProblem(
            target_id, reference, reference_text(path, qualname),
            workloads=tuple({"name": f.stem, "captured": str(f)} for f in files), signatures=signatures,
        )
    raise MaxcodeError(f"target {target_id}: cannot find its source (run pytest --maxcode in {root} once to record it)")


def _splits(target_id: str) -> list[tuple[str, str]]:
    """Every (module, qualname) reading of ``module.qualname``, the longest module first."""
    parts = target_id.split(".")
    return [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)]


def _module_matches(module: str, path: Path) -> bool:
    last = module.split(".")[-1]
    return path.stem == last or (path.stem == "__init__" and path.parent.name == last)


def _module_file(root: Path, module: str) -> Path | None:
    parts = module.split(".")
    for base in (root, root / "src"):
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _from_store(root: Path, target_id: str) -> tuple[str | None, Path | None]:
    """The kind and source file a previous run recorded, if it recorded any."""
    db = default_path(root)
    if not db.is_file():
        return None, None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT kind, source_path FROM targets WHERE id=?", (target_id,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None, None
    if row is None or not Path(row[1]).is_file():
        return None, None
    return str(row[0]), Path(row[1])
