"""Where the oracle's verdict used to live; it is a plain type now (``pytest_maxcode.model.verdict``).

Kept so that code written against ``pytest_maxcode.oracle.verdict`` keeps importing.
"""

from ..model.verdict import (
    CORRECT,
    STATUSES,
    UNDECIDED_WIDTH,
    Verdict,
    VerdictStatus,
    undecided,
)

__all__ = ["CORRECT", "STATUSES", "UNDECIDED_WIDTH", "Verdict", "VerdictStatus", "undecided"]
