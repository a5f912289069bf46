"""A target's handle (``fn.maxcode``): its options, its state, and the hash of its reference.

Its own module so that both the decorator, which makes handles, and the runtime dispatcher,
which installs kernels into them, import it without importing each other.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .lock import sha256_text

__all__ = [
    "MaxcodeWarning",
    "TargetHandle",
    "TargetOptions",
    "normalized_source",
    "normalized_source_in_file",
]


class MaxcodeWarning(UserWarning):
    """A target fell back to its reference (stale kernel, failed build, ...)."""


@dataclass
class TargetOptions:
    lang: str = "auto"
    atol: float | None = None
    rtol: float | None = None
    inputs: Callable[[], Any] | None = None
    min_speedup: float | None = None
    budget: int | None = None
    inplace: bool = False
    #: None: [tool.maxcode] accept_range_limited decides (options.accepts_range_limited)
    accept_range_limited: bool | None = None


@dataclass(eq=False)
class TargetHandle:
    """State of one target, reachable as ``fn.maxcode`` (or ``Module.maxcode``)."""

    id: str
    kind: str  # "function" | "module"
    reference: Callable[..., Any]  # the undecorated function, or the original forward
    owner: type | None  # the nn.Module subclass, for module targets
    options: TargetOptions
    source_file: str | None
    active: str = "reference"  # "reference" | "kernel" | "capture"
    reason: str = "no accepted kernel in maxcode.lock"
    _impl: Callable[..., Any] | None = None
    _warned: set[str] = field(default_factory=set)

    def __repr__(self) -> str:
        return f"<maxcode target {self.id}: {self.active} ({self.reason})>"

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"maxcode: {self.id}: {message}", MaxcodeWarning, stacklevel=3)

    def use_reference(self, reason: str) -> None:
        self._impl = None
        self.active = "reference"
        self.reason = reason

    def reference_hash(self) -> str:
        """Hash of the reference's code, decorators, comments and layout excluded."""
        obj = self.owner if self.owner is not None else self.reference
        return sha256_text(normalized_source(obj))


def _normalize(node: ast.AST) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node.decorator_list = []
    return ast.unparse(node)


def normalized_source(obj: Any) -> str:
    """The code that defines ``obj``, without decorators, comments or layout."""
    source = textwrap.dedent(inspect.getsource(obj))
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return source
    return _normalize(node)


def normalized_source_in_file(path: Path, qualname: str) -> str | None:
    """As ``normalized_source``, found by qualified name without importing the file."""
    try:
        body: list[ast.stmt] = ast.parse(path.read_text()).body
    except (OSError, SyntaxError):
        return None
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            (n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part),
            None,
        )
        if node is None:
            return None
        body = node.body  # type: ignore[attr-defined]
    return _normalize(node) if node is not None else None
