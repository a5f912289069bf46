"""Re-measuring a speedup a report quotes: ``maxcode remeasure TARGET --repeat N``.

Every speedup the report, the terminal and a pull request print comes with this command and
the interval each repeat should land in. It times the report's best kernel against the
target's reference on the inputs the tests gave it (``.maxcode/inputs/TARGET``), N times, each
in a fresh oracle with a fresh seed, and counts the repeats inside the quoted interval.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import MaxcodeError
from .model.report import ReferenceInfo, Report, TargetResult, parse_report, row_of
from .options import MIN_SPEEDUP

if TYPE_CHECKING:
    from .oracle.repeat import Repeats

#: the share of repeats that must land inside the quoted interval for the claim to hold
#: (a 95% prediction interval misses now and then; a claim that misses often does not reproduce)
HOLDS_SHARE = 0.8


def holds(r: Repeats) -> bool:
    return bool(r.again) and r.inside >= HOLDS_SHARE * len(r.again)


def _entry(root: Path, target_id: str) -> tuple[Report, TargetResult]:
    """The project's last report, read once (a one-line MaxcodeError where it is missing or
    malformed), and its target ``target_id``."""
    path = root / ".maxcode" / "reports" / "report.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MaxcodeError(f"no report at {path}: run pytest --maxcode first") from None
    except (OSError, ValueError) as e:
        raise MaxcodeError(f"cannot read {path} ({e}): run pytest --maxcode again") from None
    report = parse_report(data, str(path))
    for t in report.targets:
        if t.id == target_id:
            return report, t
    known = ", ".join(t.id for t in report.targets) or "none"
    raise MaxcodeError(f"{target_id} is not in {path} (targets: {known})")


@dataclass(frozen=True)
class Quote:
    """What re-measuring a report's target needs from it: the speedup it quotes, with its interval,
    the kernel's source and the reference's file (None: the report does not say)."""

    target_id: str
    kind: str | None
    status: str | None
    speedup: float | None
    speedup_ci: list[Any] | None
    source_path: str | None
    reference_file: str | None

    @classmethod
    def of(cls, t: TargetResult) -> Quote:
        return cls(t.id, t.kind, str(t.status), t.speedup, t.speedup_ci, t.best.source_path if t.best else None,
                   t.reference.file if t.reference else None)

    @classmethod
    def read(cls, row: object) -> Quote | None:
        """A row of a report on disk, read as ``maxcode status`` and ``show`` read it: as much as it
        says (a hand-written row without a status still offers its command); None where it has no id."""
        if not isinstance(row, Mapping) or not isinstance(row.get("id"), str):
            return None
        best, ref = row.get("best"), row_of(ReferenceInfo, row.get("reference"))
        source = best.get("source_path") if isinstance(best, Mapping) else None
        return cls(row["id"], row.get("kind"), row.get("status"), row.get("speedup"), row.get("speedup_ci"),
                   source if isinstance(source, str) else None, ref.file if ref is not None else None)


def measurable_here(root: Path) -> dict[str, tuple[str, list[float]]]:
    """Target id -> (sha256 of the kernel the project's last report quotes, its interval), for
    every target ``maxcode remeasure`` can re-time here; empty without a readable report (a
    fresh clone: the lock travels, the report and the captured inputs do not)."""
    try:
        report = json.loads((root / ".maxcode" / "reports" / "report.json").read_text())
    except (OSError, ValueError):
        return {}
    targets = report.get("targets") if isinstance(report, dict) else None
    found = {}
    for row in targets if isinstance(targets, list) else []:
        q = Quote.read(row)
        try:
            if q is not None and unmeasurable(root, q) is None and q.speedup_ci is not None:
                found[q.target_id] = (quoted_kernel_hash(root, q), [float(x) for x in q.speedup_ci])
        except (OSError, ValueError):  # unreadable, not text, or a name the filesystem refuses
            continue
    return found


def unmeasurable(root: Path, q: Quote) -> str | None:
    """Why the report's target ``q`` cannot be re-measured in the project at ``root`` (one
    line saying what to do), or None: the one test behind both the command and every output
    that offers it (``maxcode status``, ``maxcode show``)."""
    target_id, ci = q.target_id, q.speedup_ci
    if "\0" in target_id:
        return "a malformed target in the report: run pytest --maxcode again"
    if q.kind == "program":
        return (f"{target_id} is a program target: re-measure it with "
                f"pytest --maxcode --maxcode-target={shlex.quote(target_id)} --maxcode-remeasure")
    interval = isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)
    if not isinstance(q.source_path, str) or not interval or q.speedup is None:
        return f"{target_id} has no measured kernel in the report ({q.status}): nothing to re-measure"
    inputs, kernel = root / ".maxcode" / "inputs" / target_id, root / q.source_path
    if not _captured(inputs) or not kernel.is_file() or not q.reference_file:
        return f"{target_id}: its captured inputs or kernel are gone ({inputs}, {kernel}): run pytest --maxcode again"
    return None


def quoted_kernel_hash(root: Path, q: Quote) -> str:
    """sha256 of the kernel a measurable report row quotes, hashed as the lock hashes kernels."""
    return hashlib.sha256((root / str(q.source_path)).read_text().encode()).hexdigest()


def _captured(inputs: Path) -> list[Path]:
    return sorted(p for p in inputs.glob("*.pt") if p.name != "module.pt")


def remeasure(root: Path, target_id: str, n: int, *, sandbox: str = "auto",
              progress: Callable[[str], None] | None = None) -> Repeats:
    """Time the report's best kernel for ``target_id`` ``n`` more times; raise MaxcodeError, one
    line, for anything that leaves nothing to re-measure."""
    # status and show ask unmeasurable() without these: the oracle and torch
    from .model.verdict import Verdict  # keeps start-up fast
    from .oracle.check import CandidateSpec, CheckConfig  # keeps start-up fast
    from .oracle.reference import ReferenceSpec  # keeps start-up fast
    from .oracle.repeat import repeat  # keeps start-up fast

    report, t = _entry(root, target_id)
    why = unmeasurable(root, Quote.of(t))
    if why is not None or t.best is None or t.reference is None or t.speedup_ci is None:
        raise MaxcodeError(why or f"{target_id} has no measured kernel in the report: nothing to re-measure")
    ref = t.reference
    inputs = root / ".maxcode" / "inputs" / target_id
    captured = _captured(inputs)
    kernel = root / t.best.source_path
    kind = t.kind or "function"
    reference = ReferenceSpec(kind, root / ref.file, ref.qualname, module=ref.module, rootdir=root,
                              instance=inputs / "module.pt" if kind == "module" else None)
    min_speedup = report.options.get("min_speedup") or MIN_SPEEDUP
    config = CheckConfig(device=t.device_or_default(), min_speedup=min_speedup, inplace=t.returns is not None, sandbox=sandbox)
    quoted = Verdict(candidate=str(kernel), status="faster" if t.verified else "not_faster",
                     speedup=t.speedup, speedup_ci=list(t.speedup_ci))
    workloads = [{"name": p.stem, "captured": str(p)} for p in captured]
    return repeat(reference, config, root, CandidateSpec.from_path(kernel), quoted, n, workloads=workloads, progress=progress)
