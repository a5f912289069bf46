"""What a check compares against: a KernelBench problem file or ``path.py:function``.

Parsed with ``ast`` only: the reference's code runs in a worker, never in this process.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import MaxcodeError


@dataclass(frozen=True)
class ReferenceSpec:
    kind: str  # "module" (an nn.Module class) | "function"
    path: Path
    name: str
    inputs_path: Path | None = None
    inputs_name: str | None = None

    @property
    def target_id(self) -> str:
        return f"{self.module or self.path.stem}.{self.name}"

    def source_hash(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    module: str | None = None  # a marked target is imported by name from rootdir
    rootdir: Path | None = None
    instance: Path | None = None  # an nn.Module target: its captured instance

    def to_worker(self) -> dict:
        return {
            "module": self.module,
            "rootdir": str(self.rootdir) if self.rootdir else None,
            "instance": str(self.instance) if self.instance else None,
            "kind": self.kind,
            "path": str(self.path),
            "name": self.name,
            "inputs_path": str(self.inputs_path) if self.inputs_path else None,
            "inputs_name": self.inputs_name,
        }


def _split(spec: str, what: str) -> tuple[Path, str | None]:
    path_s, _, name = spec.partition(":")
    if spec.count(":") > 1 and len(path_s) == 1:  # a Windows drive letter is not supported
        raise MaxcodeError(f"{what} {spec!r}: expected FILE.py or FILE.py:NAME")
    path = Path(path_s)
    if path.suffix != ".py":
        raise MaxcodeError(f"{what} {spec!r}: expected a Python file (FILE.py or FILE.py:NAME)")
    if not path.is_file():
        raise MaxcodeError(f"{what} {path}: no such file")
    return path.resolve(), (name or None)


def _definitions(path: Path) -> dict[str, str]:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as e:
        raise MaxcodeError(f"reference {path}: syntax error at line {e.lineno}: {e.msg}") from None
    defs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defs[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = "function"
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defs.setdefault(t.id, "value")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                defs.setdefault((alias.asname or alias.name).split(".")[0], "import")
    return defs


def parse_reference(spec: str, inputs: str | None = None) -> ReferenceSpec:
    path, name = _split(spec, "reference")
    defs = _definitions(path)
    if name is None:
        if defs.get("Model") != "class":
            raise MaxcodeError(
                f"reference {path.name}: no class Model; name the function as {path.name}:FUNCTION"
            )
        name = "Model"
    if name not in defs:
        raise MaxcodeError(f"reference {path.name}: defines no {name}")
    kind = "module" if defs[name] == "class" else "function"
    inputs_path = inputs_name = None
    if inputs:
        inputs_path, inputs_name = _split(inputs, "--inputs")
        if inputs_name is None:
            inputs_name = "get_inputs"
        if inputs_name not in _definitions(inputs_path):
            raise MaxcodeError(f"--inputs {inputs_path.name}: defines no {inputs_name}")
    elif "get_inputs" not in defs:
        raise MaxcodeError(
            f"reference {path.name}: no get_inputs(); pass --inputs FILE.py:FUNCTION"
        )
    return ReferenceSpec(kind, path, name, inputs_path, inputs_name)
