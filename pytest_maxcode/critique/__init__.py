"""Critique: a diagnosis and next steps for each evaluated candidate (DESIGN.md section 6).

Raw numbers ("12% slower") are a poor signal for the next proposal; a diagnosis grounded in
what the oracle measured is a good one. The rule-based critic needs no LLM; the LLM critic
writes the diagnosis from the same facts and is checked against them.
"""

from .grounding import unsupported_claims
from .llm import LLMCritic
from .rules import Critique, RuleCritic

__all__ = ["Critique", "LLMCritic", "RuleCritic", "unsupported_claims"]
