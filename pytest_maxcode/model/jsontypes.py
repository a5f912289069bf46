"""The type of a JSON value, for the values that really are JSON: a report read from disk, a
row's unknown keys, a stored verdict. One definition at the bottom, so every layer names the same one."""

from __future__ import annotations

from typing import TypeAlias, Union

#: any value ``json.loads`` returns (and ``json.dumps`` takes)
JSON: TypeAlias = Union[None, bool, int, float, str, "list[JSON]", "dict[str, JSON]"]
#: a JSON object
JSONObject: TypeAlias = "dict[str, JSON]"
