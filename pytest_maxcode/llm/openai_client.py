"""OpenAI, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp, SGLang), through the official
``openai`` SDK's Chat Completions API.

A local server needs no key: without OPENAI_API_KEY a placeholder is sent. Only OpenAI's own URL
requires the key. OpenAI's prompt caching is automatic; ``cached_tokens`` are reported as cache
reads (and left out of ``input_tokens``, as Anthropic counts them).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any
from urllib.parse import urlparse

from .._extras import require
from ..errors import MaxcodeError
from .base import LLMRequest, LLMResponse, abort_sdk_client, is_scripted_model
from .errors import map_sdk_error

OPENAI_URL = "https://api.openai.com/v1"
NO_KEY = "maxcode-no-key"  # sent to servers that need none (the SDK insists on some key)

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def _is_openai_host(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.com")


class OpenAIClient:
    provider = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_retries: int = 2, timeout: float = 600.0) -> None:
        self.model = model
        self.max_retries = int(max_retries)
        self.timeout = float(timeout)
        url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")
        self.base_url = url
        self.official = _is_openai_host(url)
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if self.official:
                raise MaxcodeError(
                    "OPENAI_API_KEY is not set: export it, or point --maxcode-llm at a local server "
                    "(openai:MODEL@http://127.0.0.1:8000/v1) or pick anthropic:MODEL / replay:PATH"
                )
            api_key = NO_KEY
        self._secrets = (api_key if api_key != NO_KEY else None,)
        openai = require("openai", "--maxcode-llm=openai:...")

        self._sdk = openai
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=url,
            max_retries=self.max_retries,
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
        )

    def describe(self) -> str:
        return f"openai:{self.model}@{self.base_url}"

    def params(self, request: LLMRequest) -> dict[str, Any]:
        messages: list[dict[str, str]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend({"role": m.role, "content": m.content} for m in request.messages)
        kw: dict[str, Any] = {"model": self.model, "messages": messages}
        if not (self.official and float(request.temperature) == 1.0):
            kw["temperature"] = float(request.temperature)  # OpenAI's reasoning models take only their default
        if self.official:
            kw["max_completion_tokens"] = int(request.max_tokens)  # OpenAI's reasoning models reject max_tokens
        else:
            kw["max_tokens"] = int(request.max_tokens)  # what vLLM, Ollama and llama.cpp all accept
        return kw

    def complete(self, request: LLMRequest) -> LLMResponse:
        kw = self.params(request)
        t0 = time.perf_counter()
        try:
            out = self._client.chat.completions.create(**kw)
        except self._sdk.OpenAIError as exc:
            raise map_sdk_error(exc, self._sdk, label=f"openai:{self.model}", url=self.base_url,
                                provider="openai", model=self.model, timeout=self.timeout,
                                retries=self.max_retries, secrets=self._secrets) from None
        latency = time.perf_counter() - t0
        choice = out.choices[0] if out.choices else None
        text = (choice.message.content or "") if choice is not None and choice.message is not None else ""
        extra: dict[str, Any] = {"id": out.id}
        m = _THINK.match(text)
        if m:  # local reasoning models (Qwen3, DeepSeek-R1) think inline
            extra["thinking_chars"] = len(m.group(1))
            text = text[m.end():]
        usage = out.usage
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
        model = out.model or self.model
        return LLMResponse(
            text=text,
            model=model,
            input_tokens=max(0, prompt - cached),
            output_tokens=completion,
            cache_read_tokens=cached,
            cache_write_tokens=0,
            stop_reason=str((choice.finish_reason if choice is not None else "") or ""),
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
