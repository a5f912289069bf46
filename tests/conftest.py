"""Shared fixtures: run the real ``maxcode`` CLI in a subprocess, in a fresh project dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

# the suite never talks to a real model: without these, a developer's key would make the
# plugin's default policy call Anthropic (and spend money) in every subprocess run
for _var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(_var, None)


#: pytest plugins that come with the test tools (local HTTP servers, their async stack, a test
#: runner's own), not with pytest-maxcode or the projects the tests make
SUITE_ONLY_PLUGINS = ("pytest_httpserver", "anyio", "xdist", "xdist.looponfail")


def _without_suite_plugins() -> str:
    """``PYTEST_ADDOPTS`` for the pytest processes the tests start: the caller's, plus a
    ``-p no:`` for each of :data:`SUITE_ONLY_PLUGINS`."""
    blocked = " ".join(f"-p no:{name}" for name in SUITE_ONLY_PLUGINS)
    return f"{os.environ.get('PYTEST_ADDOPTS', '')} {blocked}".strip()


@pytest.fixture(scope="session", autouse=True)
def _machine_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One compiled call path and one machine probe for the whole session, as on a user's
    machine: ``pytester`` points ``HOME`` at each test's folder, and without these every
    ``pytest --maxcode`` it starts would build the helper again (20 s on a 2-core runner)."""
    root = tmp_path_factory.mktemp("machine-cache")
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in (("MAXCODE_CALLPATH_CACHE", "callpath"), ("MAXCODE_CACHE_DIR", "machine")):
            if not os.environ.get(var):
                mp.setenv(var, str(root / sub))
        # under pytest-xdist, the pytest processes tests start are not workers: pytest-benchmark
        # turns itself off where it sees a worker's variables
        for var in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
            mp.delenv(var)
        # the pytest processes the tests start are a user's runs: they load pytest-benchmark and
        # maxcode, not this suite's own tools (0.2 s of every start-up, hundreds of starts a run)
        mp.setenv("PYTEST_ADDOPTS", _without_suite_plugins())
        yield


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's ``pytester``, whose runs load the plugins a user's run has, as the suite's other
    pytest processes do: ``pytester`` clears ``PYTEST_ADDOPTS`` for isolation, and every
    ``runpytest_subprocess`` (and the ``--maxcode`` runs under it) imported this suite's tools."""
    monkeypatch.setenv("PYTEST_ADDOPTS", _without_suite_plugins())
    return pytester


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def verdicts(self) -> list[dict]:
        return json.loads(self.stdout)

    def by_name(self) -> dict[str, dict]:
        return {Path(v["candidate"]).name: v for v in self.verdicts}


def run_maxcode(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> CliResult:
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_maxcode.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh directory holding a copy of tests/data/chain (reference and candidates)."""
    dest = tmp_path / "proj"
    shutil.copytree(DATA / "chain", dest)
    return dest


@pytest.fixture(scope="module")
def module_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("proj") / "chain"
    shutil.copytree(DATA / "chain", dest)
    return dest
