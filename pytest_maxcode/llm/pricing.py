"""What a reply cost, in USD, from its token counts.

Prices are per million tokens and matched by the longest model-name prefix, so dated snapshots
(``claude-sonnet-4-5-20250929``) find their family. Unknown, local and scripted models are
unpriced: ``cost`` answers None (the service counts them as 0 and lists them as unpriced).
Override or add models with the ``prices`` setting::

    {"my-model": {"input": 1.0, "output": 2.0, "cache_write": 1.25, "cache_read": 0.1}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import MaxcodeError
from ..tables import Price, parse_price
from .base import LLMResponse


def _claude(inp: float, out: float) -> Price:
    # prompt caching: a 5-minute cache write is 1.25x input, a cache read 0.1x input
    return Price(inp, out, inp * 1.25, inp * 0.1)


def _openai(inp: float, out: float, cached: float) -> Price:
    # OpenAI caches automatically: no write surcharge, reads at the cached-input price
    return Price(inp, out, inp, cached)


DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic
    "claude-opus-4-0": _claude(15, 75),
    "claude-opus-4-2025": _claude(15, 75),
    "claude-4-opus": _claude(15, 75),
    "claude-opus-4-1": _claude(15, 75),
    "claude-opus-4-5": _claude(5, 25),
    "claude-opus-4-6": _claude(5, 25),
    "claude-sonnet-4": _claude(3, 15),
    "claude-4-sonnet": _claude(3, 15),
    "claude-3-7-sonnet": _claude(3, 15),
    "claude-3-5-sonnet": _claude(3, 15),
    "claude-haiku-4-5": _claude(1, 5),
    "claude-3-5-haiku": _claude(0.8, 4),
    "claude-3-haiku": _claude(0.25, 1.25),
    # OpenAI
    "gpt-4o": _openai(2.5, 10, 1.25),
    "gpt-4o-mini": _openai(0.15, 0.6, 0.075),
    "gpt-4.1": _openai(2, 8, 0.5),
    "gpt-4.1-mini": _openai(0.4, 1.6, 0.1),
    "gpt-4.1-nano": _openai(0.1, 0.4, 0.025),
    "gpt-5": _openai(1.25, 10, 0.125),
    "gpt-5-mini": _openai(0.25, 2, 0.025),
    "gpt-5-nano": _openai(0.05, 0.4, 0.005),
    "o3": _openai(2, 8, 0.5),
    "o3-mini": _openai(1.1, 4.4, 0.55),
    "o4-mini": _openai(1.1, 4.4, 0.275),
}


def _price_from_setting(name: str, spec: Price | Mapping[str, Any]) -> Price:
    """A parsed entry as it is (the settings' ``prices``); a raw one parsed, MaxcodeError if bad."""
    try:
        return parse_price(name, spec)
    except ValueError as e:
        raise MaxcodeError(str(e)) from None


class Prices:
    def __init__(self, overrides: Mapping[str, Price | Mapping[str, Any]] | None = None, *, defaults: bool = True) -> None:
        """``overrides``: the settings' ``prices`` (parsed when they were loaded), or raw entries."""
        self.table: dict[str, Price] = dict(DEFAULT_PRICES) if defaults else {}
        self.overridden: set[str] = set()
        for name, spec in (overrides or {}).items():
            self.table[str(name)] = _price_from_setting(str(name), spec)
            self.overridden.add(str(name))

    def price(self, model: str) -> Price | None:
        names = [model]
        if "/" in model:
            names.append(model.rsplit("/", 1)[-1])  # "anthropic/claude-..." on routers
        if model.startswith("anthropic."):
            names.append(model[len("anthropic."):])  # Bedrock ids
        for name in names:  # scripted models match nothing but an explicit override
            best = max((p for p in self.table if name.startswith(p)), key=len, default=None)
            if best is not None:
                return self.table[best]
        return None

    def cost(self, model: str, response: LLMResponse) -> float | None:
        """USD for one reply, or None when the model is unpriced (local, scripted, unknown)."""
        p = self.price(model)
        if p is None:
            return None
        return (response.input_tokens * p.input + response.output_tokens * p.output
                + response.cache_write_tokens * p.cache_write + response.cache_read_tokens * p.cache_read) / 1e6
