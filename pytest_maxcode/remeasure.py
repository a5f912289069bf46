"""Re-measuring a speedup a report quotes: ``maxcode remeasure TARGET --repeat N``.

Every speedup the report, the terminal and a pull request print comes with this command and
the interval each repeat should land in. It times the report's best kernel against the
target's reference on the inputs the tests gave it (``.maxcode/inputs/TARGET``), N times, each
in a fresh oracle with a fresh seed, and counts the repeats inside the quoted interval.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import MaxcodeError
from .model.verdict import Verdict
from .oracle.check import CandidateSpec, CheckConfig
from .oracle.reference import ReferenceSpec
from .oracle.repeat import Repeats, repeat

#: the share of repeats that must land inside the quoted interval for the claim to hold
#: (a 95% prediction interval misses now and then; a claim that misses often does not reproduce)
HOLDS_SHARE = 0.8


def holds(r: Repeats) -> bool:
    return bool(r.again) and r.inside >= HOLDS_SHARE * len(r.again)


def _entry(root: Path, target_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    path = root / ".maxcode" / "reports" / "report.json"
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise MaxcodeError(f"no report at {path}: run pytest --maxcode first") from None
    except (OSError, ValueError) as e:
        raise MaxcodeError(f"cannot read {path} ({e}): run pytest --maxcode again") from None
    for t in report.get("targets") or []:
        if isinstance(t, dict) and t.get("id") == target_id:
            return report, t
    known = ", ".join(str(t.get("id")) for t in report.get("targets") or [] if isinstance(t, dict)) or "none"
    raise MaxcodeError(f"{target_id} is not in {path} (targets: {known})")


def remeasure(root: Path, target_id: str, n: int, *, sandbox: str = "auto",
              progress: Callable[[str], None] | None = None) -> Repeats:
    """Time the report's best kernel for ``target_id`` ``n`` more times; raise MaxcodeError, one
    line, for anything that leaves nothing to re-measure."""
    report, t = _entry(root, target_id)
    best, ci, ref = t.get("best"), t.get("speedup_ci"), t.get("reference") or {}
    if t.get("kind") == "program":
        raise MaxcodeError(f"{target_id} is a program target: re-measure it with "
                           f"pytest --maxcode --maxcode-target={shlex.quote(target_id)} --maxcode-remeasure")
    if not isinstance(best, dict) or not ci or t.get("speedup") is None:
        raise MaxcodeError(f"{target_id} has no measured kernel in the report ({t.get('status')}): nothing to re-measure")
    inputs = root / ".maxcode" / "inputs" / target_id
    captured = sorted(p for p in inputs.glob("*.pt") if p.name != "module.pt")
    kernel = root / best["source_path"]
    if not captured or not kernel.is_file() or not ref.get("file"):
        raise MaxcodeError(f"{target_id}: its captured inputs or kernel are gone ({inputs}, {kernel}): run pytest --maxcode again")
    kind = t.get("kind") or "function"
    reference = ReferenceSpec(kind, root / ref["file"], ref["qualname"], module=ref.get("module"), rootdir=root,
                              instance=inputs / "module.pt" if kind == "module" else None)
    min_speedup = (report.get("options") or {}).get("min_speedup") or 1.05
    config = CheckConfig(device=t.get("device") or "cpu", min_speedup=min_speedup, inplace=t.get("returns") is not None,
                         sandbox=sandbox)
    quoted = Verdict(candidate=str(kernel), status="faster" if t.get("verified") else "not_faster",
                     speedup=t["speedup"], speedup_ci=list(ci))
    workloads = [{"name": p.stem, "captured": str(p)} for p in captured]
    return repeat(reference, config, root, CandidateSpec.from_path(kernel), quoted, n, workloads=workloads, progress=progress)
