"""Reward-to-go: the expected best reward still to come below a search node.

Labels come from stored search trees (``labels``); a light CPU model learns them from
node features (``features``, ``model``), so a strategy can rerank k proposals and send
only the promising ones to the oracle.
"""

from .features import FEATURE_NAMES, node_features
from .labels import reward_to_go, trees

__all__ = ["FEATURE_NAMES", "node_features", "reward_to_go", "trees"]
