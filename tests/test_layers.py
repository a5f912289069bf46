"""The package's layer contracts (``[tool.importlinter]`` in pyproject.toml) hold, and they can fail.

import-linter reads every import statically, those inside functions included (only imports
under ``if TYPE_CHECKING:`` are left out), so a cycle or an import up a layer hidden in a
function breaks a contract as surely as one at the top of a file. The layers and why they are
in that order: docs/explanation/architecture.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
OWNERS = ("search layer", "settings", "lead")

pytest.importorskip("importlinter", reason="the layer contracts need import-linter (pip install 'pytest-maxcode[test]')")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package found in ``cwd``, with no cache (a stale one could pass)."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


def test_the_package_keeps_its_layer_contracts() -> None:
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_an_import_up_a_layer_a_cycle_and_a_private_import_each_break_a_contract(tmp_path: Path) -> None:
    """A copy of the package with three violations, each placed inside a function."""
    shutil.copytree(ROOT / "pytest_maxcode", tmp_path / "pytest_maxcode", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    package = tmp_path / "pytest_maxcode"
    with open(package / "errors.py", "a") as f:  # the bottom layer reaching the search
        f.write("\n\ndef _upward():\n    from .search import loop\n\n    return loop\n")
    with open(package / "targets" / "lock.py", "a") as f:  # the lock file's module importing the decorator
        f.write("\n\ndef _cycle():\n    from . import decorator\n\n    return decorator\n")
    with open(package / "search" / "loop.py", "a") as f:  # the report's private module from another package
        f.write("\n\ndef _private():\n    from ..report import _html\n\n    return _html\n")
    r = lint_imports(tmp_path)
    out = r.stdout
    assert r.returncode != 0, out
    assert "pytest_maxcode.errors is not allowed to import pytest_maxcode.search" in out, out[-6000:]
    assert re.search(r"No cycles are allowed in pytest_maxcode\.targets", out), out[-6000:]
    assert "pytest_maxcode.search.loop -> pytest_maxcode.report._html" in out, out[-6000:]


def test_every_ignored_import_names_who_removes_it() -> None:
    """An ``ignore_imports`` entry is a debt with an owner, said in the comment above it."""
    text = PYPROJECT.read_text()
    section = text[text.index("[tool.importlinter]"):]
    comment = ""
    for line in section.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment = stripped
        elif stripped.startswith('"pytest_maxcode') and "->" in stripped:
            assert any(owner in comment for owner in OWNERS), f"{stripped}: no comment naming its owner above it"
        elif stripped and not stripped.startswith('"'):
            comment = ""



def test_every_module_of_the_package_has_a_layer() -> None:
    """A new top-level module or package must be placed in the layers, or nothing constrains it."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}
    package = ROOT / "pytest_maxcode"
    children = {f"pytest_maxcode.{p.stem}" for p in package.glob("*.py") if p.name != "__init__.py"}
    children |= {f"pytest_maxcode.{p.name}" for p in package.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert children - placed == set(), "add these to a layer in [tool.importlinter] (pyproject.toml)"
