"""From settings to an ``LLMService``: the ``--maxcode-llm`` spec and its companions.

Accepted specs::

    anthropic                      Claude, the default model (DEFAULT_ANTHROPIC_MODEL)
    anthropic:MODEL                Claude, that model
    anthropic:MODEL@URL            ... through another Messages-API endpoint (a proxy, a gateway)
    openai:MODEL                   OpenAI (needs OPENAI_API_KEY)
    openai:MODEL@URL               any OpenAI-compatible server: vLLM, Ollama, llama.cpp (no key needed)
    replay:PATH                    a recorded cassette (relative to the project root); no network
    none                           no LLM, even where ANTHROPIC_API_KEY is set

No spec at all means Anthropic's default model where ANTHROPIC_API_KEY is set, else no LLM.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import MaxcodeError
from ..options import Settings
from .anthropic_client import AnthropicClient
from .cassette import ReplayClient
from .openai_client import OpenAIClient
from .pricing import Prices
from .service import LLMService

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"  # claude-sonnet-4-5 reaches end-of-life 2026-11-30 (the SDK warns)

FORMS = "anthropic, anthropic:MODEL[@URL], openai:MODEL[@URL], replay:PATH, none"

_MODEL_AT_URL = re.compile(r"^(?P<model>.*?)@(?P<url>https?://\S+)$")


@dataclass(frozen=True)
class LLMSpec:
    provider: str  # "anthropic" | "openai" | "replay" | "none"
    model: str | None = None
    base_url: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        if self.provider == "replay":
            return f"replay:{self.path}"
        if self.provider == "none":
            return "none"
        return f"{self.provider}:{self.model}" + (f"@{self.base_url}" if self.base_url else "")


def parse_llm_spec(spec: str | None, *, flag: str = "--maxcode-llm", forms: str = FORMS) -> LLMSpec | None:
    """``None`` or blank -> None (the caller picks the default); a bad spec -> one-line MaxcodeError."""
    if spec is None or not str(spec).strip():
        return None
    text = str(spec).strip()

    def bad(why: str) -> MaxcodeError:
        return MaxcodeError(f"{flag}={text!r}: {why}; use one of: {forms}")

    provider, sep, rest = text.partition(":")
    provider = provider.strip().lower()
    rest = rest.strip()
    if provider in ("none", "off", "no") and not sep:
        return LLMSpec("none")
    if provider == "replay":
        if not rest:
            raise bad("replay needs a cassette path")
        return LLMSpec("replay", path=rest)
    if provider not in ("anthropic", "openai"):
        raise bad(f"unknown provider {provider!r}")
    if sep and not rest:
        raise bad(f"{provider}: needs a model after the colon")
    model, url = rest, None
    m = _MODEL_AT_URL.match(rest)
    if m:
        model, url = m.group("model").strip(), m.group("url")
    elif "@" in rest:
        host = rest.rpartition("@")[2]
        if host.startswith("localhost") or "." in host or ":" in host or "/" in host:
            raise bad("the URL after @ must start with http:// or https://")
    if not model:
        if provider == "openai":
            raise bad("openai needs a model (openai:MODEL or openai:MODEL@URL)")
        model = DEFAULT_ANTHROPIC_MODEL
    if any(c.isspace() for c in model):
        raise bad(f"model {model!r} contains spaces")
    return LLMSpec(provider, model=model, base_url=url)


def make_client(spec: LLMSpec, *, root: Path, timeout: float = 600.0, retries: int = 2):
    if spec.provider == "anthropic":
        return AnthropicClient(spec.model or DEFAULT_ANTHROPIC_MODEL, base_url=spec.base_url,
                               max_retries=retries, timeout=timeout)
    if spec.provider == "openai":
        return OpenAIClient(spec.model or "", base_url=spec.base_url, max_retries=retries, timeout=timeout)
    if spec.provider == "replay":
        path = Path(spec.path or "")
        return ReplayClient(path if path.is_absolute() else root / path, label=spec.path)
    raise MaxcodeError(f"--maxcode-llm={spec}: no client for this provider; use one of: {FORMS}")


def make_service(settings: Settings, root: Path, store_path: Path | None) -> LLMService | None:
    """The configured LLM, or None when there is none (then the built-in policies work alone).

    Reads ``llm``, ``llm_concurrency``, ``llm_timeout``, ``llm_retries``, ``llm_cache``,
    ``record`` (a cassette path, relative to ``root``) and ``prices``."""
    spec = parse_llm_spec(settings.llm)
    if spec is None:
        if not os.environ.get("ANTHROPIC_API_KEY"):
            return None
        spec = LLMSpec("anthropic", model=DEFAULT_ANTHROPIC_MODEL)
    if spec.provider == "none":
        return None
    record_path = None
    if settings.record:
        record_path = Path(settings.record)
        if not record_path.is_absolute():
            record_path = root / record_path
    prices = Prices(settings.prices)
    client = make_client(spec, root=root, timeout=settings.llm_timeout, retries=settings.llm_retries)
    return LLMService(client, store_path=store_path, prices=prices, concurrency=settings.llm_concurrency,
                      cache=settings.llm_cache, record=record_path)


def make_critic_service(settings: Settings, root: Path, store_path: Path | None,
                        proposer: LLMService | None) -> LLMService | None:
    """The critic's model (``--maxcode-critic``): None for the rule critic, the proposer's own
    service for ``llm``, or a service of its own for a spec (often a stronger model)."""
    critic = settings.critic
    if critic in ("", "rules"):
        return None
    if critic == "llm":
        if proposer is None:
            raise MaxcodeError("--maxcode-critic=llm uses the proposer's model, and there is none: set --maxcode-llm "
                               "(or ANTHROPIC_API_KEY), or name the critic's model: --maxcode-critic=anthropic:MODEL")
        return proposer
    forms = "rules, llm (the proposer's model), anthropic[:MODEL[@URL]], openai:MODEL[@URL], replay:PATH"
    return _own_service(settings, critic, "--maxcode-critic", forms, "critic", root, store_path)


def make_scorer_service(settings: Settings, root: Path, store_path: Path | None,
                        proposer: LLMService | None) -> LLMService | None:
    """The generative reward-to-go model of ``--maxcode-rerank=llm``: ``--maxcode-rerank-llm``
    (typically ``openai:MODEL@URL``, a fine-tuned model on vLLM), else the proposer's model."""
    if settings.rerank != "llm":
        return None
    spec = settings.rerank_llm
    if not spec:
        if proposer is None:
            raise MaxcodeError("--maxcode-rerank=llm needs a scoring model: set --maxcode-rerank-llm=openai:MODEL@URL "
                               "(or --maxcode-llm, whose model then scores too)")
        return proposer
    return _own_service(settings, spec, "--maxcode-rerank-llm", FORMS, "scorer", root, store_path)


def _own_service(settings: Settings, spec_text: str, flag: str, forms: str, role: str, root: Path,
                 store_path: Path | None) -> LLMService:
    """A model of its own for one role. When the run records, it records to the cassette's
    name with ``.ROLE`` before the suffix, so each cassette replays one model.

    Parameters because a role's service is built from the run's settings plus that role's own flag,
    its accepted forms, the root and the store: what the error line names.
    """
    spec = parse_llm_spec(spec_text, flag=flag, forms=forms)
    if spec is None or spec.provider == "none":
        raise MaxcodeError(f"{flag}={spec_text!r}: use one of: {forms}")
    record = settings.record
    if record:
        path = Path(record)
        record = str(path.with_name(f"{path.stem}.{role}{path.suffix or '.jsonl'}"))
    return make_service(settings.replace(llm=spec_text, record=record), root, store_path)
