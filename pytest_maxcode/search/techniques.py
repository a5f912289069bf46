"""The optimization techniques a candidate uses: defined in ``model.techniques`` (the value
model's features read them below the search), re-exported here for the search, rl and tests."""

from ..model.techniques import DESCRIPTIONS, LOOP, NAMES, PATTERNS, cell_name, tags

__all__ = ["DESCRIPTIONS", "LOOP", "NAMES", "PATTERNS", "cell_name", "tags"]
