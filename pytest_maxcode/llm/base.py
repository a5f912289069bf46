"""The one small interface every LLM client implements, and the request/response records.

A request is provider-neutral: a static ``system`` prefix (task, ABI, reference: the part
worth caching) and the conversation. Its ``key`` covers everything that changes the reply,
including ``sample`` so that k samples of one prompt are k different cache entries.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Message:
    role: str  # "user" | "assistant"
    content: str


@dataclass(frozen=True)
class LLMRequest:
    system: str
    messages: tuple[Message, ...]
    max_tokens: int = 8192
    temperature: float = 1.0
    thinking_tokens: int = 0  # extended thinking budget (Anthropic); 0 = off
    sample: int = 0  # which of k samples of the same prompt this is

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["messages"] = [asdict(m) for m in self.messages]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LLMRequest:
        return cls(
            system=d["system"],
            messages=tuple(Message(**m) for m in d["messages"]),
            max_tokens=d.get("max_tokens", 8192),
            temperature=d.get("temperature", 1.0),
            thinking_tokens=d.get("thinking_tokens", 0),
            sample=d.get("sample", 0),
        )

    def key(self, provider: str, model: str) -> str:
        blob = json.dumps({"provider": provider, "model": model, "request": self.to_json()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def shape_key(self, provider: str, model: str) -> str:
        """The key with the conversation's numbers masked (``#N`` node names kept).

        Prompts quote measurements (times, speedups, bandwidth shares) that differ in every
        run, so a replayed search meets prompts that differ from the recorded ones only in
        those numbers; this key lets a cassette match them, in recorded order."""
        d = self.to_json()
        d["messages"] = [dict(m, content=_NUMBER.sub("N", m["content"])) for m in d["messages"]]
        blob = json.dumps({"provider": provider, "model": model, "request": d}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


_NUMBER = re.compile(r"(?<![#\w])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass
class LLMResponse:
    text: str
    model: str  # as the server named it
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stop_reason: str = ""
    latency_s: float = 0.0
    source: str = "api"  # "api" | "cache" | "replay"
    cost_usd: float = 0.0
    call_id: int | None = None  # the store's llm_calls row, once recorded
    scripted: bool = False  # a test double answered (its server named a model "scripted...")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class LLMClient(Protocol):
    """One provider endpoint. ``complete`` is thread-safe and raises ``MaxcodeError`` with one
    line naming the option to fix for configuration problems (missing key, bad model, no server)."""

    provider: str  # "anthropic" | "openai" | "replay" | ...
    model: str

    def complete(self, request: LLMRequest) -> LLMResponse: ...

    def describe(self) -> str: ...


def abort_sdk_client(sdk: Any) -> None:
    """Fail the requests an Anthropic or OpenAI SDK client has in flight, at once.

    Closing the client alone leaves a blocked read waiting for up to the request timeout;
    shutting the sockets of its pooled connections ends those reads, and the closed client
    then refuses the SDK's retry. The SDKs offer no cancellation, so this reaches through
    their httpx client to httpcore's pool (``connections`` is public there; the stream's
    ``get_extra_info("socket")`` is too). Best effort: a transport without them is skipped.
    """
    http = getattr(sdk, "_client", None)  # the SDK's httpx.Client
    pool = getattr(getattr(http, "_transport", None), "_pool", None)
    for conn in list(getattr(pool, "connections", None) or []):
        stream = getattr(getattr(conn, "_connection", None), "_network_stream", None)
        try:
            stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        except Exception:  # another transport, a connection already closed
            pass
    try:
        sdk.close()
    except Exception:  # best effort: the caller is ending the run either way
        pass


def is_scripted_model(model: str) -> bool:
    """Our fake servers name their model ``scripted-...``: such replies are not a real model's."""
    return model.lower().startswith("scripted")
