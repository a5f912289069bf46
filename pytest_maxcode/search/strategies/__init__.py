"""The search strategies, by the name a run selects one with (``make_strategy``)."""

from __future__ import annotations

from ..strategy import Strategy
from .beam import BeamStrategy
from .best_of_n import BestOfNStrategy
from .effi import EffiStrategy
from .maxcode import MaxcodeStrategy
from .qd import QDStrategy
from .refine import RefineStrategy
from .sweep import SweepStrategy

STRATEGIES: dict[str, type] = {
    "sweep": SweepStrategy,
    "best-of-n": BestOfNStrategy,
    "refine": RefineStrategy,
    "effi": EffiStrategy,
    "maxcode": MaxcodeStrategy,
    "beam": BeamStrategy,
    "qd": QDStrategy,
}


def make_strategy(name: str) -> Strategy:
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}") from None
    return cls()


__all__ = [
    "STRATEGIES",
    "BeamStrategy",
    "BestOfNStrategy",
    "EffiStrategy",
    "MaxcodeStrategy",
    "QDStrategy",
    "RefineStrategy",
    "SweepStrategy",
    "make_strategy",
]
