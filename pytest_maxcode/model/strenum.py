"""A ``str`` enum that prints as its value (``enum.StrEnum`` is Python 3.11+; we support 3.10)."""

from __future__ import annotations

from enum import Enum


class PlainStrEnum(str, Enum):
    """Compares equal to its string, and formats and prints as it, so JSON, the store and
    messages see the plain value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
