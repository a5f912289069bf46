"""The LLM critic: a model (often a stronger one than the proposer's, thinking at length)
reads the candidate and the oracle's measured facts and writes a diagnosis and next steps.

The class (``kind``) stays the rule critic's, derived from the facts alone, so features
and statistics never depend on a model's wording. The diagnosis is checked against the
facts it was given (``grounding``); a claim nothing measured is flagged, stored, and
marked as such wherever the critique is shown, the next prompt included.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from ..llm import LLMRequest, LLMService, LLMUnavailable, Message
from ..model.budget import CallBudget, Reservation
from ..model.search import Node
from .facts import has_counters, measured_facts, render
from .grounding import unsupported_claims
from .rules import Critique, RuleCritic

SYSTEM = """You are the critic in a search for faster implementations of one function.
For one candidate you get its code and the facts the oracle measured about it. Write:
- a diagnosis: for a compile error, its cause; for a wrong output, where and how it is wrong;
  for a correct candidate, what limits its speed;
- concrete next steps for the next attempt.

Cite only the facts listed under "Measured facts". Do not state a number (a time, a share
of a roof, a speedup) that is not among them, and do not claim hardware-counter facts
(occupancy, cache hit rates, bank conflicts, stalls) unless counters are listed.

Reply in exactly this form:
DIAGNOSIS: one to three sentences
NEXT:
- a step
- another step

The function being optimized (the reference):
```python
{reference}
```"""

_DIAGNOSIS = re.compile(r"^\s*\**DIAGNOSIS\**\s*:\s*\**\s*(.*?)(?=^\s*\**NEXT\**\s*:|\Z)", re.MULTILINE | re.DOTALL | re.IGNORECASE)
_NEXT = re.compile(r"^\s*\**NEXT\**\s*:\s*\**(.*)\Z", re.MULTILINE | re.DOTALL | re.IGNORECASE)


def parse_critique(text: str) -> tuple[str, list[str]]:
    """(diagnosis, next steps); an empty diagnosis means the reply did not follow the form."""
    d = _DIAGNOSIS.search(text)
    diagnosis = " ".join(d.group(1).split()) if d else ""
    n = _NEXT.search(text)
    steps = []
    if n:
        for line in n.group(1).splitlines():
            line = line.strip()
            if line[:1] in "-*" or re.match(r"\d+[.)]\s", line):
                step = re.sub(r"^(?:[-*]|\d+[.)])\s*", "", line).strip().rstrip(".")
                if step:
                    steps.append(step)
    return diagnosis, steps


def critic_request(reference: str, node: Node, rule: Critique, *, lang: str, max_tokens: int,
                   thinking_tokens: int) -> tuple[LLMRequest, list[tuple[str, str]]]:
    """The request, and the facts the reply is held to."""
    facts = measured_facts(node)
    facts_text = render(facts)
    code = node.proposal.spec.text if node.proposal.spec is not None else "(no code: the reply had none)"
    fence = {"cuda": "cuda", "cpp": "cpp"}.get(lang, "python")
    user = (
        f"## Candidate #{node.index}\n```{fence}\n{code}\n```\n\n"
        f"## Measured facts\n{facts_text}\n\n"
        f"## Class (from the facts)\n{rule.kind}\n"
    )
    request = LLMRequest(SYSTEM.format(reference=reference.strip()), (Message("user", user),), max_tokens=max_tokens,
                         temperature=0.0 if not thinking_tokens else 1.0, thinking_tokens=thinking_tokens)
    return request, facts


class LLMCritic:
    """Critiques by a model, one request per evaluated candidate; each takes its place in the
    budget before it is sent, and a candidate the budget has no room for gets the rule
    critique (its ``critic`` says so)."""

    name = "llm"

    def __init__(self, service: LLMService, *, reference: str, lang: str, run_id: int | None, target_id: str,
                 budget: CallBudget, thinking_tokens: int = 0, max_tokens: int = 2048, concurrency: int = 4) -> None:
        """Nine parameters because the loop wires each from a setting of its own (keyword-only
        past ``service``); a record holding them would only move the list."""
        self.service = service
        self.reference = reference
        self.lang = lang
        self.run_id = run_id
        self.target_id = target_id
        self.budget = budget
        self.thinking_tokens = thinking_tokens
        # extended thinking counts against max_tokens, so the answer keeps its own room
        self.max_tokens = max_tokens + thinking_tokens
        self.concurrency = max(1, concurrency)
        self.rules = RuleCritic()
        self.unavailable: str | None = None
        self.label = f"llm:{service.client.provider}:{service.client.model}"
        budget.spends(evaluated=1)

    def _wanted(self, node: Node) -> bool:
        """Whether a model is asked: not for a reply without code (nothing ran, the rule's account
        is the whole story), nor once the model is unavailable."""
        return node.verdict.status != "format" and not self.unavailable

    def critique(self, node: Node) -> Critique:
        return self._critique(node, self.budget.reserve() if self._wanted(node) else None)

    def _critique(self, node: Node, held: Reservation | None) -> Critique:
        rule = self.rules.critique(node)
        if held is None:
            if self._wanted(node):
                rule.critic = f"rules (no LLM-call room left for the critic; {self.label})"
            return rule
        with held:
            if self.unavailable:  # another thread's request found the model gone
                return rule
            request, facts = critic_request(self.reference, node, rule, lang=self.lang, max_tokens=self.max_tokens,
                                            thinking_tokens=self.thinking_tokens)
            try:
                resp = self.service.complete(request, run_id=self.run_id, target_id=self.target_id)
            except LLMUnavailable as e:
                self.unavailable = str(e)
                return rule
            held.settle(resp)
        diagnosis, steps = parse_critique(resp.text)
        if not diagnosis:
            rule.critic = f"rules (the critic's reply had no DIAGNOSIS: line; {self.label})"
            return rule
        code = node.proposal.spec.text if node.proposal.spec is not None else ""
        flags = unsupported_claims(diagnosis, render(facts), code, counters=has_counters(facts))
        return Critique(rule.kind, diagnosis, steps, dict(rule.facts), critic=self.label, unsupported=flags,
                        llm_call_id=resp.call_id)

    def critique_all(self, nodes: list[Node]) -> list[Critique]:
        # places are taken in the nodes' order, so a short budget goes to the first evaluated
        held = [self.budget.reserve() if self._wanted(n) else None for n in nodes]
        if len(nodes) <= 1:
            return [self._critique(n, h) for n, h in zip(nodes, held)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(nodes))) as pool:
            return list(pool.map(self._critique, nodes, held))
