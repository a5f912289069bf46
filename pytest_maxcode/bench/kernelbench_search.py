"""The search side of ``maxcode bench kernelbench``: each problem searched like a marked
``nn.Module`` target, through the same loop, policies, strategies and store as
``pytest --maxcode``, with the problem file itself as the reference (weights from
``get_init_inputs()`` under the oracle's seed, inputs from ``get_inputs()``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from .. import options
from .._version import __version__
from ..errors import MaxcodeError
from ..llm import make_service
from ..oracle.reference import parse_reference
from ..search.loop import SearchContext, search_target
from ..search.policy import TargetInfo
from ..store import Store
from .problems import Problem

CAPTURE = """
import importlib, sys
import torch
sys.path.insert(0, {folder!r})
from pytest_maxcode.targets.capture import signature
problem = importlib.import_module({module!r})
torch.manual_seed(0)
inputs = list(problem.get_inputs())
torch.save({{"signature": signature(tuple(inputs)), "sets": [inputs]}}, {path!r})
"""


class Searcher:
    def __init__(self, out: Path, ns: argparse.Namespace, device: str, progress: Callable[[str], None]) -> None:
        self.settings = options.load_settings({"budget": ns.budget, "llm": ns.llm, "strategy": ns.strategy, "device": device}, None)
        self.device = device
        self.progress = progress
        out.mkdir(parents=True, exist_ok=True)
        self.store = Store(out / "maxcode.db")
        self.run_id = self.store.begin_run("maxcode bench kernelbench", __version__)
        self.llm = make_service(self.settings, out, out / "maxcode.db") if ns.llm else None

    def _capture(self, ref_file: Path, module: str, target_id: str) -> Path:
        """One input set from get_inputs(), in a subprocess: problem code never runs in this process."""
        folder = ref_file.parent / ".maxcode" / "inputs" / target_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "w0.pt"
        code = CAPTURE.format(folder=str(ref_file.parent), module=module, path=str(path))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
            raise MaxcodeError(f"{ref_file.name}: get_inputs() failed: {last[0][:300]}")
        return path

    def __call__(self, problem: Problem, ref_file: Path, module: str) -> tuple[Path | None, str]:
        target_id = f"{module}.Model"
        try:
            captured = self._capture(ref_file, module, target_id)
        except MaxcodeError as e:
            return None, str(e)
        lang = "cuda" if self.device == "cuda" else "cpp"
        target = TargetInfo(target_id, module, "Model", ref_file, "module", lang, problem=True)
        ctx = SearchContext(self.store, self.run_id, self.progress, llm=self.llm)
        result: Any = search_target(target, [captured], ref_file.parent, self.settings, ctx, reference=parse_reference(str(ref_file)))
        best = result.state.best
        if best is None or not best.verdict.correct or best.proposal.spec is None:
            return None, result.error or f"no correct candidate in {len(result.state.trajectory)} evaluation(s): {result.stop_reason}"
        return Path(best.proposal.spec.path), ""

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
        self.store.finish_run(self.run_id)
        self.store.close()
