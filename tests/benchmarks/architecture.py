"""Architecture measurements of a checkout: the before/after numbers of issue 16.

For the ``pytest_maxcode`` package of a checkout (this one, or the path given), it prints:

* imports that run up a layer, by the layer order of the ``layers`` contract in this checkout's
  ``pyproject.toml`` (``[tool.importlinter]``), so a base commit is read with today's order;
* file-level and package-level import cycles (strongly connected components);
* a package's private modules (``report._format``) and private names (``_helper``) imported
  from another package;
* imports placed inside functions, and how many carry a comment saying they keep start-up fast;
* ``Any`` in annotations (parameters, returns, annotated assignments; quoted ones included);
* the longest function, and the functions over 60 lines or over 6 parameters whose docstring
  gives no reason (a phrase such as "long because", "parameters because", "kept whole");
* the modules a ``settings`` value crosses: those with a function taking a parameter named
  ``settings``, with its reads in each as a dict (``settings.get(...)`` / ``settings[...]``) and
  as typed fields (``settings.name``); and every module where a value named ``settings`` appears.

Imports under ``if TYPE_CHECKING:`` never run, so they count for neither cycles nor layers (the
import-linter contract excludes them the same way); imports inside functions do count.

Run from the repository root (plain text on stdout)::

    python tests/benchmarks/architecture.py [CHECKOUT]
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PACKAGE = "pytest_maxcode"
HERE = Path(__file__).resolve().parents[2]
START_UP = re.compile(r"start[- ]?up", re.IGNORECASE)
REASON = re.compile(r"(long|parameters|arguments|lines) because|kept (whole|together|in one)", re.IGNORECASE)
MAX_LINES = 60
MAX_PARAMS = 6


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool
    type_checking: bool
    start_up_comment: bool


def layer_order(pyproject: Path) -> list[list[str]]:
    """The layers contract's layers, top first, each a list of module names."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    for contract in config.get("contracts", []):
        if contract.get("type") == "layers" and not contract.get("containers"):
            return [[m.strip() for m in re.split(r"[|:]", layer)] for layer in contract["layers"]]
    raise SystemExit(f"{pyproject}: no top-level 'layers' contract in [tool.importlinter]")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _function_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _has_start_up_comment(source_lines: list[str], line: int) -> bool:
    """A comment on the import's line, or on the line above the block of imports it is in; blank
    lines within or above the block (``import torch``, a blank line, then the package's own) are
    part of it."""
    if START_UP.search(source_lines[line - 1].partition("#")[2]):
        return True
    above = line - 2
    while above >= 0 and (not source_lines[above].strip() or source_lines[above].strip().startswith(("import ", "from "))):
        if START_UP.search(source_lines[above].partition("#")[2]):
            return True
        above -= 1
    return above >= 0 and source_lines[above].strip().startswith("#") and bool(START_UP.search(source_lines[above]))


def imports_of(root: Path, modules: set[str]) -> list[Import]:
    found: list[Import] = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = module_name(root, path)
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        checking, in_function = _type_checking_lines(tree), _function_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                found.append(
                    Import(name, target, node.lineno, node.lineno in in_function, node.lineno in checking,
                           _has_start_up_comment(lines, node.lineno))
                )
    return found


def private_names_across_packages(root: Path, modules: set[str]) -> list[str]:
    """``from other_package.module import _name``: a private name used outside its package."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = module_name(root, path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = resolve(name, path.name == "__init__.py", node)
            if internal(base, modules) is None or top_package(base) == top_package(name):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and f"{base}.{alias.name}" not in modules:
                    found.append(f"{name}:{node.lineno} -> {base}.{alias.name}")
    return found


def internal(imported: str, modules: set[str]) -> str | None:
    """The package module an import names (the longest known prefix), or None for a third party."""
    parts = imported.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def top_package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    counter = 0
    nodes = set(edges) | {v for vs in edges.values() for v in vs}
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return sorted(result)


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    best: tuple[int, int] | None = None
    for depth, names in enumerate(layers):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[1]:
                    best = (depth, len(name))
    return None if best is None else best[0]


def _any_count(annotation: ast.AST | None) -> int:
    if annotation is None:
        return 0
    count = 0
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            count += 1
        elif isinstance(node, ast.Attribute) and node.attr == "Any":
            count += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                count += _any_count(ast.parse(node.value, mode="eval"))
            except SyntaxError:
                pass
    return count


def _walk_named(tree: ast.AST, prefix: str) -> list[tuple[ast.AST, str]]:
    """Every node with the qualified name of the class or function it is (or is inside)."""
    out: list[tuple[ast.AST, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            here = f"{scope}.{child.name}" if named else scope  # type: ignore[attr-defined]
            out.append((child, here))
            visit(child, here)

    visit(tree, prefix)
    return out


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def _settings_reads(function: ast.AST) -> tuple[int, int]:
    """Reads of the ``settings`` value in a function: as a dict (``settings.get(...)``,
    ``settings[...]``) and as typed fields (``settings.name``)."""
    dict_reads = field_reads = 0
    for sub in ast.walk(function):
        if isinstance(sub, ast.Subscript) and _is_settings(sub.value):
            dict_reads += 1
        elif isinstance(sub, ast.Attribute) and _is_settings(sub.value):
            if sub.attr == "get":
                dict_reads += 1
            else:
                field_reads += 1
    return dict_reads, field_reads


def _is_settings(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "settings") or (isinstance(node, ast.Attribute) and node.attr == "settings")


def mentions_settings(root: Path) -> list[str]:
    """The modules where a value named ``settings`` appears at all: a parameter, a variable or an attribute."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(
            (isinstance(n, ast.Name) and n.id == "settings") or (isinstance(n, ast.Attribute) and n.attr == "settings")
            or (isinstance(n, ast.arg) and n.arg == "settings")
            for n in ast.walk(tree)
        ):
            found.append(module_name(root, path))
    return found


def functions_report(root: Path) -> tuple[int, tuple[str, int], list[str], dict[str, tuple[int, int, int]]]:
    any_count = 0
    longest = ("", 0)
    unexplained: list[str] = []
    settings: dict[str, tuple[int, int, int]] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = module_name(root, path)
        tree = ast.parse(path.read_text())
        for node, qualname in _walk_named(tree, name):
            if isinstance(node, ast.AnnAssign):
                any_count += _any_count(node.annotation)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    any_count += _any_count(arg.annotation)
            any_count += _any_count(node.returns)
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            length = (node.end_lineno or node.lineno) - start + 1
            if length > longest[1]:
                longest = (qualname, length)
            params = _params(node)
            doc = ast.get_docstring(node) or ""
            if (length > MAX_LINES or len(params) > MAX_PARAMS) and not REASON.search(doc):
                unexplained.append(f"{qualname}: {length} lines, {len(params)} parameters")
            if "settings" in params:
                functions, dict_reads, field_reads = settings.get(name, (0, 0, 0))
                a, b = _settings_reads(node)
                settings[name] = (functions + 1, dict_reads + a, field_reads + b)
    return any_count, longest, unexplained, settings


def main(argv: list[str]) -> None:
    root = Path(argv[0]).resolve() if argv else HERE
    layers = layer_order(HERE / "pyproject.toml")
    modules = {module_name(root, p) for p in (root / PACKAGE).rglob("*.py")}
    # a folder without __init__.py (a namespace package) is a package all the same
    modules |= {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 1)}
    found = imports_of(root, modules)
    runtime = [i for i in found if not i.type_checking]
    edges: dict[str, set[str]] = defaultdict(set)
    package_edges: dict[str, set[str]] = defaultdict(set)
    upward: list[str] = []
    private_modules: list[str] = []  # a package's _module imported from another package
    for imp in runtime:
        target = internal(imp.imported, modules)
        if target is None or target == imp.importer or imp.importer.startswith(target + "."):
            continue  # third party, or a module's own package (its __init__ runs first anyway)
        edges[imp.importer].add(target)
        a, b = top_package(imp.importer), top_package(target)
        if a != b and a != PACKAGE and b != PACKAGE:
            package_edges[a].add(b)
        last = target.rsplit(".", 1)
        if a != b and len(last) == 2 and last[0] != PACKAGE and last[1].startswith("_"):
            private_modules.append(f"{imp.importer}:{imp.line} -> {target}")
        la, lb = layer_of(imp.importer, layers), layer_of(target, layers)
        if la is not None and lb is not None and lb < la:
            lazy = " (inside a function)" if imp.in_function else ""
            upward.append(f"{imp.importer}:{imp.line} -> {target}{lazy}")
    in_function = [i for i in found if i.in_function]
    in_function_internal = [i for i in in_function if internal(i.imported, modules)]
    any_count, longest, unexplained, settings = functions_report(root)
    print(f"checkout: {root}")
    print(f"layers (top first): {' / '.join(', '.join(n.removeprefix(PACKAGE + '.') for n in l) for l in layers)}")
    print(f"\nimports that run up a layer: {len(upward)}")
    for line in sorted(upward):
        print(f"  {line}")
    file_cycles = cycles(edges)
    print(f"\nfile-level cycles: {len(file_cycles)}")
    for cycle in file_cycles:
        print(f"  {' <-> '.join(cycle)}")
    package_cycles = cycles(package_edges)
    print(f"package-level cycles: {len(package_cycles)}")
    for cycle in package_cycles:
        print(f"  {' <-> '.join(cycle)}")
    print(f"private modules imported from another package: {len(private_modules)}")
    for line in sorted(set(private_modules)):
        print(f"  {line}")
    private = private_names_across_packages(root, modules)
    print(f"private names imported from another package: {len(private)}")
    for line in private:
        print(f"  {line}")
    print(f"\nimports inside functions: {len(in_function)} ({len(in_function_internal)} of the package's own modules)")
    print(f"  with a comment saying they keep start-up fast: {sum(i.start_up_comment for i in in_function)}")
    print(f"\n'Any' in annotations: {any_count}")
    print(f"longest function: {longest[0]} ({longest[1]} lines)")
    print(f"functions over {MAX_LINES} lines or {MAX_PARAMS} parameters with no reason in the docstring: {len(unexplained)}")
    for line in unexplained:
        print(f"  {line}")
    print(f"\nmodules a 'settings' value crosses (a function there takes a parameter named settings): {len(settings)}")
    print("  (functions taking it; its reads as a dict, settings.get(...)/settings[...]; its reads as typed fields)")
    for name, (functions, dict_reads, field_reads) in sorted(settings.items()):
        print(f"  {name}: {functions} functions, {dict_reads} dict reads, {field_reads} field reads")
    mentioned = mentions_settings(root)
    print(f"modules where a value named settings appears at all: {len(mentioned)}")
    print("  " + ", ".join(m.removeprefix(PACKAGE + ".") for m in mentioned))
    counts = Counter(top_package(i.importer) for i in in_function_internal)
    print("\nimports of the package inside functions, by package: " + ", ".join(
        f"{k.removeprefix(PACKAGE + '.')} {v}" for k, v in counts.most_common()))


if __name__ == "__main__":
    main(sys.argv[1:])
