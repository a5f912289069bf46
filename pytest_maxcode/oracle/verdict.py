"""The verdict on one candidate: the record every reward and every pull request rests on."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: "format" is the search's, not the oracle's: a proposal with no usable code, never run
STATUSES = ("faster", "not_faster", "wrong", "compile_error", "runtime_error", "crash", "timeout", "rejected", "format")
CORRECT = ("faster", "not_faster")

#: How wide (high / low) a 95% interval that straddles ``min_speedup`` may be before the
#: measurement counts as undecided rather than "not faster". A decided interval is narrow
#: (a few percent on a quiet machine; 1.3 is already a loud one); one spanning a factor of 2
#: cannot tell a candidate that is 1.4x faster from one that is 1.4x slower, so calling it
#: "not faster" would be a guess. Such a verdict is not reused from the store (it is timed
#: again), and a run left with one says the machine was too noisy to decide.
UNDECIDED_WIDTH = 2.0


def undecided(status: str, speedup_ci: Any, min_speedup: float) -> bool:
    """A timed ``not_faster`` whose interval straddles the bar and is too wide to decide."""
    if status != "not_faster" or not isinstance(speedup_ci, (list, tuple)) or len(speedup_ci) != 2:
        return False
    low, high = speedup_ci
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)) or not (low > 0 and math.isfinite(high)):
        return False
    return low < min_speedup <= high and high / low > UNDECIDED_WIDTH


@dataclass
class Verdict:
    candidate: str
    status: str
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    reference_s: float | None = None
    candidate_s: float | None = None
    compile_s: float | None = None
    eval_s: float | None = None
    weak_check: bool = False
    reasons: list[str] = field(default_factory=list)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    hash: str = ""
    format: str = ""
    lang: str = ""
    #: the OS sandbox the candidate ran in (Isolation.describe(): "bwrap", "none (not enforced: ...)")
    sandbox: str = ""
    #: None: correct on every range set the reference accepted (or none was tried); else what the
    #: candidate passed and failed beyond the captured range ("passed: captured range, x1e-3;
    #: failed: x1e3"). Reported, but not applied or proposed unless the target accepts it.
    range_limited: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def correct(self) -> bool:
        return self.status in CORRECT

    def to_json(self) -> dict[str, Any]:
        return _finite(asdict(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        """A verdict from :meth:`to_json`'s dict, including one stored before a field existed
        (it gets the field's default) or by a newer version (unknown keys are dropped)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinity: such numbers become null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v
