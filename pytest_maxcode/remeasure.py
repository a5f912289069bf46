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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import MaxcodeError

if TYPE_CHECKING:
    from .oracle.repeat import Repeats

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
    targets = _targets(report)
    for t in targets:
        if isinstance(t, dict) and t.get("id") == target_id:
            return report, t
    known = ", ".join(str(t.get("id")) for t in targets if isinstance(t, dict)) or "none"
    raise MaxcodeError(f"{target_id} is not in {path} (targets: {known})")


def _targets(report: Any) -> list[Any]:
    targets = report.get("targets") if isinstance(report, dict) else None
    return targets if isinstance(targets, list) else []


def measurable_here(root: Path) -> dict[str, tuple[str, list[float]]]:
    """Target id -> (sha256 of the kernel the project's last report quotes, its interval), for
    every target ``maxcode remeasure`` can re-time here; empty without a readable report (a
    fresh clone: the lock travels, the report and the captured inputs do not)."""
    try:
        report = json.loads((root / ".maxcode" / "reports" / "report.json").read_text())
    except (OSError, ValueError):
        return {}
    found = {}
    for t in _targets(report):
        try:
            if unmeasurable(root, t) is None:
                found[t["id"]] = (quoted_kernel_hash(root, t), [float(x) for x in t["speedup_ci"]])
        except (OSError, ValueError):  # unreadable, not text, or a name the filesystem refuses
            continue
    return found


def unmeasurable(root: Path, t: Any) -> str | None:
    """Why the report's target row ``t`` cannot be re-measured in the project at ``root`` (one
    line saying what to do), or None: the one test behind both the command and every output
    that offers it (``maxcode status``, ``maxcode show``)."""
    if not isinstance(t, dict) or not isinstance(t.get("id"), str) or "\0" in t["id"]:
        return "a malformed target in the report: run pytest --maxcode again"
    target_id, best, ci, ref = t["id"], t.get("best"), t.get("speedup_ci"), t.get("reference")
    if t.get("kind") == "program":
        return (f"{target_id} is a program target: re-measure it with "
                f"pytest --maxcode --maxcode-target={shlex.quote(target_id)} --maxcode-remeasure")
    interval = isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)
    if not isinstance(best, dict) or not isinstance(best.get("source_path"), str) or not interval or t.get("speedup") is None:
        return f"{target_id} has no measured kernel in the report ({t.get('status')}): nothing to re-measure"
    inputs, kernel = root / ".maxcode" / "inputs" / target_id, root / best["source_path"]
    if not _captured(inputs) or not kernel.is_file() or not isinstance(ref, dict) or not ref.get("file"):
        return f"{target_id}: its captured inputs or kernel are gone ({inputs}, {kernel}): run pytest --maxcode again"
    return None


def quoted_kernel_hash(root: Path, t: dict[str, Any]) -> str:
    """sha256 of the kernel a measurable report row quotes, hashed as the lock hashes kernels."""
    return hashlib.sha256((root / t["best"]["source_path"]).read_text().encode()).hexdigest()


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
    why = unmeasurable(root, t)
    if why is not None:
        raise MaxcodeError(why)
    best, ci, ref = t["best"], t["speedup_ci"], t["reference"]
    inputs = root / ".maxcode" / "inputs" / target_id
    captured = _captured(inputs)
    kernel = root / best["source_path"]
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
