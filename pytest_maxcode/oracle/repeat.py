"""Re-measuring a quoted speedup: does it reproduce? (``maxcode check --repeat N``)

A speedup is only worth quoting if another run lands inside its interval. This runs the same
candidate N more times, each in a fresh oracle (its own seed, sandboxes, processes and
buffers), and counts how many of the new points fall inside the quoted interval. The same
runs measure how far this machine drifts from one run to the next; that is kept for the
machine (:mod:`oracle.drift`) and widens later intervals where it is more than they allow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from . import probe
from .check import CandidateSpec, CheckConfig, Oracle
from .drift import Drift, estimate_drift, remember_drift
from .reference import ReferenceSpec
from ..model.verdict import Verdict


@dataclass(frozen=True)
class Repeats:
    """The quoted interval and what N further runs measured."""

    quoted: Verdict
    again: list[Verdict]
    #: the machine's drift these runs showed (None: too few measured in blocks on a quiet machine)
    drift: Drift | None = None
    device: str = "cpu"

    @property
    def inside(self) -> int:
        low, high = self.quoted.speedup_ci or (float("nan"), float("nan"))
        return sum(v.speedup is not None and low <= v.speedup <= high for v in self.again)

    def line(self) -> str:
        """One line for the terminal: the coverage, and each run's point."""
        q = self.quoted
        if not q.speedup_ci:
            return f"{Path(q.candidate).name}: no interval to re-measure ({q.status})"
        points = ", ".join(f"{v.speedup:.3g}x" if v.speedup is not None else v.status for v in self.again)
        return (f"{Path(q.candidate).name}: {self.inside} of {len(self.again)} repeats fell inside the quoted "
                f"{q.speedup:.3g}x [{q.speedup_ci[0]:.3g}, {q.speedup_ci[1]:.3g}] ({points})")

    def lines(self) -> list[str]:
        """The coverage line, and what the runs showed of the machine's drift when they could."""
        return [self.line(), *([f"{Path(self.quoted.candidate).name}: {self.drift.line(self.device)}"] if self.drift else [])]


def repeat(reference: ReferenceSpec, config: CheckConfig, root: Path, cand: CandidateSpec, quoted: Verdict, n: int,
           *, workloads: list[dict] | None = None, progress: Callable[[str], None] | None = None) -> Repeats:
    """``n`` further runs of ``cand``, each in a fresh oracle with a fresh seed (a chosen seed
    would repeat the inputs, not the measurement), recorded nowhere: they test the quoted
    verdict, they do not replace it.

    Parameters because it takes what one oracle run takes (reference, configuration, root,
    candidate) plus the quoted verdict and the count; the rest are keyword-only.
    """
    fresh = replace(config, seed=None)
    again, device = [], "cpu"
    for i in range(n):
        if progress:
            progress(f"repeat {i + 1}/{n} of {cand.path.name}")
        with Oracle(reference, fresh, root, progress=progress, workloads=workloads) as oracle:
            again.append(oracle.check([cand])[0])
            device = oracle.device
    seen = estimate_drift([quoted, *again])  # the quoted run counts where it was measured here, in blocks
    if seen is not None:
        remember_drift(probe.cache_dir(), device, seen)
    return Repeats(quoted, again, seen, device)
