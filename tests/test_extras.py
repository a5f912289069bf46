"""The core installs light and imports whole; a feature whose extra is missing says which to install.

The subprocess below can import only the standard library and the distributions that the
core requirements of pytest-maxcode pull in (read from the installed metadata, followed
transitively): any other top-level import fails as if that package were not installed.
So a module that imports an undeclared package, or an extra's package at import time,
fails here, the way it would fail in a user's fresh virtualenv.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_maxcode._extras import EXTRAS, MissingExtra, require

CORE_ONLY = textwrap.dedent(
    """
    import importlib, importlib.abc, importlib.metadata as md, re, sys

    def name_of(req):
        return re.split(r"[\\s;\\[<>=!~(]", req, maxsplit=1)[0].strip().lower().replace("_", "-")

    def core_distributions():
        seen, todo = set(), ["pytest-maxcode"]
        while todo:
            dist = todo.pop()
            if dist in seen:
                continue
            seen.add(dist)
            try:
                reqs = md.requires(dist) or []
            except md.PackageNotFoundError:
                continue
            for req in reqs:
                marker = req.split(";", 1)[1] if ";" in req else ""
                if "extra ==" in marker:
                    continue  # an extra's requirement is not core
                if marker:
                    from packaging.markers import Marker
                    if not Marker(marker).evaluate():
                        continue
                todo.append(name_of(req))
        return seen

    dists = core_distributions()
    allowed = {"pytest_maxcode", "_pytest", "py", "pkg_resources", "setuptools", "_distutils_hack"}
    for top, owners in md.packages_distributions().items():
        if any(o.lower().replace("_", "-") in dists for o in owners):
            allowed.add(top)

    class CoreOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if path is None and top not in allowed and top not in sys.stdlib_module_names and not top.startswith("_"):
                raise ModuleNotFoundError(f"No module named {top!r} (not a core dependency)", name=top)
            return None

    sys.meta_path.insert(0, CoreOnly())
    """
)


def run_core_only(body: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = CORE_ONLY + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_module_imports_with_only_the_core_dependencies(tmp_path: Path) -> None:
    r = run_core_only(
        """
        import json, pkgutil, pytest_maxcode
        failed = {}
        names = [m.name for m in pkgutil.walk_packages(pytest_maxcode.__path__, "pytest_maxcode.")]
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as e:
                failed[name] = f"{type(e).__name__}: {e}"
        print(json.dumps({"imported": len(names), "failed": failed}))
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["failed"] == {}
    assert out["imported"] > 60


def test_the_blocker_really_blocks_an_extra(tmp_path: Path) -> None:
    """The check above can fail: an extra's package is not importable in the core-only process."""
    r = run_core_only(
        """
        for name in ("github", "git", "sklearn", "ray"):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                print("blocked", name)
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["blocked", "github", "blocked", "git", "blocked", "sklearn", "blocked", "ray"]


def test_a_feature_without_its_extra_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema_version": 1, "targets": [{"id": "m.f", "status": "verified", "verified": True}]}))
    r = run_core_only(
        f"""
        from pytest_maxcode.cli import main
        sys.exit(main(["pr", {str(report)!r}, "--repo", "o/r"]))
        """,
        tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == ["maxcode: error: maxcode pr needs the 'bot' extra: pip install 'pytest-maxcode[bot]'"]


def test_require_names_the_extra_of_every_optional_module() -> None:
    assert require("json", "x").dumps([]) == "[]"
    for module, extra in EXTRAS.items():
        with pytest.raises(MissingExtra) as e:
            _missing(module)
        assert str(e.value) == f"a feature needs the '{extra}' extra: pip install 'pytest-maxcode[{extra}]'"


def _missing(module: str) -> None:
    """Import ``module`` as if it were not installed (it may be, in the test environment)."""
    saved = sys.modules.get(module)
    sys.modules[module] = None  # type: ignore[assignment]  # makes import raise ImportError
    try:
        require(module, "a feature")
    finally:
        if saved is None:
            del sys.modules[module]
        else:
            sys.modules[module] = saved
