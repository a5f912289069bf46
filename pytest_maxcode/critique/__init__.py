"""Critique: a diagnosis and next steps for each evaluated candidate (DESIGN.md section 6).

Raw numbers ("12% slower") are a poor signal for the next proposal; a diagnosis grounded in
what the oracle measured is a good one. The rule-based critic needs no LLM.
"""

from .rules import Critique, RuleCritic

__all__ = ["Critique", "RuleCritic"]
