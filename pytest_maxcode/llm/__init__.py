"""LLM access: one small client interface, Anthropic and OpenAI(-compatible) clients through their
official SDKs, record/replay cassettes, prices, and the service that caches, limits and accounts.

The SDKs are imported only when a client of theirs is made (``anthropic`` takes ~2 s to import).
"""

from .base import LLMClient, LLMRequest, LLMResponse, Message, is_scripted_model
from .config import (
    DEFAULT_ANTHROPIC_MODEL,
    LLMSpec,
    make_client,
    make_critic_service,
    make_scorer_service,
    make_service,
    parse_llm_spec,
)
from .errors import LLMUnavailable
from .pricing import Prices
from .service import LLMService

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LLMService",
    "LLMSpec",
    "LLMUnavailable",
    "Message",
    "Prices",
    "is_scripted_model",
    "make_client",
    "make_critic_service",
    "make_scorer_service",
    "make_service",
    "parse_llm_spec",
]
