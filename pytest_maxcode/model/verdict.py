"""The verdict on one candidate: the record every reward and every pull request rests on.

A plain type of the bottom layer: the oracle makes verdicts, and the search, the critics,
the value models, the report and the store read them, so none of those owns it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .strenum import PlainStrEnum


class VerdictStatus(PlainStrEnum):
    """What the oracle concluded. A ``str`` too, so stored verdicts, JSON and comparisons with
    the plain strings (``v.status == "faster"``) keep working unchanged."""

    FASTER = "faster"
    NOT_FASTER = "not_faster"
    WRONG = "wrong"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    #: the search's, not the oracle's: a proposal with no usable code, never run
    FORMAT = "format"


    @property
    def correct(self) -> bool:
        return self in (VerdictStatus.FASTER, VerdictStatus.NOT_FASTER)


STATUSES: tuple[str, ...] = tuple(s.value for s in VerdictStatus)
CORRECT: tuple[str, ...] = (VerdictStatus.FASTER.value, VerdictStatus.NOT_FASTER.value)

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
    #: always a :class:`VerdictStatus`: a plain string given here or assigned later is converted,
    #: and an unknown one is refused on the spot rather than stored
    status: VerdictStatus
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

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "status" and not isinstance(value, VerdictStatus):
            try:
                value = VerdictStatus(value)
            except ValueError:
                raise ValueError(f"unknown status {value!r}") from None
        object.__setattr__(self, name, value)

    @property
    def correct(self) -> bool:
        return self.status.correct

    def to_json(self) -> dict[str, Any]:
        data = _finite(asdict(self))
        data["status"] = self.status.value
        return data

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
