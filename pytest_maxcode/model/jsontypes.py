"""The type of a JSON value, for the values that really are JSON (a report read from disk, a
tensor layout, an LLM request as stored): one definition at the bottom, so every layer names
the same one.

``dict`` and ``list`` are invariant, so a ``dict[str, float]`` is not a ``dict[str, JSON]``: a
parameter that only reads a JSON object takes ``Mapping[str, JSON]``, which any such dict is.
"""

from __future__ import annotations

from typing import TypeAlias, Union

#: any value ``json.loads`` returns (and ``json.dumps`` takes)
JSON: TypeAlias = Union[None, bool, int, float, str, "list[JSON]", "dict[str, JSON]"]


def json_number(x: object) -> float | None:
    """A number read from JSON (a bool is not one), or None."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
