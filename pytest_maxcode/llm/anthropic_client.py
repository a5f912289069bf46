"""Claude through the official ``anthropic`` SDK (Messages API).

The static ``system`` prefix goes out as one text block marked ``cache_control: ephemeral``, so
the k samples and d refinement steps of one target share a prompt-cache entry; the SDK's own
retries (exponential backoff, honouring ``retry-after``) handle 408/409/429/5xx.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..errors import MaxcodeError
from .base import LLMRequest, LLMResponse, abort_sdk_client, is_scripted_model
from .errors import map_sdk_error

MIN_THINKING_BUDGET = 1024  # the API's floor for budget_tokens


def _adaptive_only() -> frozenset[str]:
    """Models for which the SDK deprecates ``thinking.type=enabled`` (it names them itself)."""
    try:
        # the SDK may be missing and is slow to import: loaded when a model is asked, keeps start-up fast
        from anthropic.resources.messages import messages as m

        return frozenset(getattr(m, "MODELS_TO_WARN_WITH_THINKING_ENABLED", ()))
    except ImportError:
        return frozenset()


class AnthropicClient:
    provider = "anthropic"

    def __init__(self, model: str, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 2, timeout: float = 600.0) -> None:
        self.model = model
        self.max_retries = int(max_retries)
        self.timeout = float(timeout)
        auth_token = None
        api_key = api_key or None
        if api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
            if api_key is None:
                auth_token = os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
        if api_key is None and auth_token is None:
            raise MaxcodeError(
                "ANTHROPIC_API_KEY is not set: export it, or pick another --maxcode-llm (openai:MODEL@URL, replay:PATH)"
            )
        self._secrets = (api_key, auth_token)
        try:
            # slow to import (~2 s): only when an Anthropic model is configured, which keeps start-up fast
            import anthropic
        except ImportError:
            raise MaxcodeError("--maxcode-llm=anthropic:... needs the anthropic package: pip install anthropic") from None

        self._sdk = anthropic
        self._client = anthropic.Anthropic(
            api_key=api_key,
            auth_token=auth_token if api_key is None else None,
            base_url=base_url,
            max_retries=self.max_retries,
            timeout=anthropic.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
        )
        self.base_url = str(self._client.base_url).rstrip("/")
        self._no_temperature = False
        self._adaptive_only = _adaptive_only()

    def describe(self) -> str:
        return f"anthropic:{self.model}@{self.base_url}"

    def params(self, request: LLMRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for one request.

        This SDK has no ``temperature`` parameter (recent models sample at 1.0 only), so a
        temperature other than 1.0 travels in ``extra_body``, and is dropped for good the first
        time the API refuses it."""
        kw: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(request.max_tokens),
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        if request.system:
            kw["system"] = [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}]
        if request.thinking_tokens > 0:
            budget = max(MIN_THINKING_BUDGET, int(request.thinking_tokens))
            if self.model in self._adaptive_only:
                kw["thinking"] = {"type": "adaptive"}  # 'enabled' is deprecated for these (the SDK warns)
            else:
                kw["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if kw["max_tokens"] <= budget:
                kw["max_tokens"] = budget + int(request.max_tokens)
        elif float(request.temperature) != 1.0 and not self._no_temperature:
            kw["extra_body"] = {"temperature": float(request.temperature)}
        return kw

    def complete(self, request: LLMRequest) -> LLMResponse:
        kw = self.params(request)
        t0 = time.perf_counter()
        try:
            try:
                msg = self._client.messages.create(**kw)
            except self._sdk.BadRequestError as exc:
                if "extra_body" not in kw or "temperature" not in str(exc).lower():
                    raise
                self._no_temperature = True  # this model takes no temperature: sample at its default
                kw.pop("extra_body")
                msg = self._client.messages.create(**kw)
        except self._sdk.AnthropicError as exc:
            raise map_sdk_error(exc, self._sdk, label=f"anthropic:{self.model}", url=self.base_url,
                                provider="anthropic", model=self.model, timeout=self.timeout,
                                retries=self.max_retries, secrets=self._secrets) from None
        latency = time.perf_counter() - t0
        text = "".join(getattr(b, "text", "") for b in msg.content if getattr(b, "type", "") == "text")
        thinking = "".join(getattr(b, "thinking", "") for b in msg.content if getattr(b, "type", "") == "thinking")
        usage = msg.usage
        model = msg.model or self.model
        extra: dict[str, Any] = {"id": msg.id}
        if thinking:
            extra["thinking_chars"] = len(thinking)
        return LLMResponse(
            text=text,
            model=model,
            input_tokens=int(usage.input_tokens or 0),
            output_tokens=int(usage.output_tokens or 0),
            cache_read_tokens=int(usage.cache_read_input_tokens or 0),
            cache_write_tokens=int(usage.cache_creation_input_tokens or 0),
            stop_reason=str(msg.stop_reason or ""),
            latency_s=latency,
            source="api",
            scripted=is_scripted_model(model),
            extra=extra,
        )

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        """Ctrl-C: requests in flight fail now, not after --maxcode-llm-timeout."""
        abort_sdk_client(self._client)
