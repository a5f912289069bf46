"""Fake LLM servers for tests: the Anthropic Messages API and the OpenAI Chat Completions API,
served over real HTTP on 127.0.0.1 (pytest-httpserver), so the real SDKs run end to end.

Use them as fixtures (``fake_anthropic``, ``fake_openai``: one threaded server per API for the
whole session, reset before each test)::

    from llm_fakes import fake_anthropic, fake_openai, code_reply   # in a test module
    # or: pytest_plugins = ["llm_fakes"] in the rootdir's conftest.py

    def test_x(fake_anthropic):
        fake_anthropic.script("plain text", code_reply("int main() {}"), lambda body: "...")
        fake_anthropic.fail(429, times=2)        # the next two requests get 429 (then the script)
        fake_anthropic.delay(1.0)                # every request waits 1 s first (times=N: the next N)
        spec = fake_anthropic.spec("claude-sonnet-4-6")  # "anthropic:claude-sonnet-4-6@http://127.0.0.1:PORT"
        ... fake_anthropic.requests  # the JSON bodies received, in order (failed ones too)

or as a context manager where a test needs its own server (to stop it)::

    with FakeLLMServer("openai") as srv: ...

A subprocess (pytester.runpytest_subprocess, the ``maxcode`` CLI) reaches the server through its
URL; set ``ANTHROPIC_API_KEY`` to anything (``FakeLLMServer.env()`` gives both variables).

Every reply names its model ``scripted-<requested model>`` (or ``.model`` when set), which is how
the package tells scripted replies from a real model's.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Union

import pytest
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

FAKE_KEY = "sk-fake-test-key-0123456789"


@dataclass
class Reply:
    """One scripted reply with more control than a bare string."""

    text: str
    stop_reason: str | None = None  # default: end_turn (Anthropic) / stop (OpenAI)
    thinking: str | None = None  # Anthropic: a thinking block before the text (default when thinking is on)
    model: str | None = None
    output_tokens: int | None = None


Script = Union[str, Reply, Callable[[dict[str, Any]], str | Reply]]


def code_reply(code: str, lang: str = "cpp", prose: str = "Here is a faster version.") -> str:
    """A model-style reply: prose, then the code in one fenced block."""
    return f"{prose}\n\n```{lang}\n{code.strip()}\n```\n"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                     404: "not_found_error", 408: "timeout_error", 413: "request_too_large",
                     429: "rate_limit_error", 500: "api_error", 503: "api_error", 529: "overloaded_error"}
_OPENAI_ERRORS = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
                  404: "invalid_request_error", 429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}


class FakeLLMServer:
    """One fake API on 127.0.0.1. ``api`` is "anthropic" or "openai"."""

    def __init__(self, api: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if api not in ("anthropic", "openai"):
            raise ValueError(api)
        self.api = api
        self.server = HTTPServer(host=host, port=port, threaded=True)
        self.path = "/v1/messages" if api == "anthropic" else "/v1/chat/completions"
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.generation = 0
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        self.server.expect_request(self.path, method="POST").respond_with_handler(self._handle)
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server.is_running():
            self.server.stop()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Forget everything scripted and received (the fixtures do this before each test)."""
        with self._lock:
            self.generation += 1
            self.requests: list[dict[str, Any]] = []
            self.headers: list[dict[str, str]] = []
            self._queue: deque[Script] = deque()
            self._failures: deque[tuple[int, str | None, dict[str, str]]] = deque()
            self._delays: deque[float] = deque()
            self._delay_all: float = 0.0
            self.default: Script | None = None
            self.model: str | None = None  # None: "scripted-" + the requested model
            self.api_key: str | None = None  # set: requests with another key get 401
            self.known_models: set[str] | None = None  # set: other models get 404
            self.in_flight = 0
            self.max_in_flight = 0
            self._seen_prefixes: set[str] = set()

    # -- what tests use -------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        """The SDK's base_url: the root for Anthropic, ``.../v1`` for OpenAI."""
        root = f"http://{self.server.host}:{self.server.port}"
        return root if self.api == "anthropic" else root + "/v1"

    def spec(self, model: str | None = None) -> str:
        """The ``--maxcode-llm`` value that points at this server."""
        model = model or ("claude-sonnet-4-6" if self.api == "anthropic" else "local-model")
        return f"{self.api}:{model}@{self.url}"

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this server."""
        if self.api == "anthropic":
            return {"ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": self.url}
        return {"OPENAI_API_KEY": FAKE_KEY, "OPENAI_BASE_URL": self.url}

    def script(self, *replies: Script) -> FakeLLMServer:
        """Queue replies, served one per request in order: a str, a Reply, or a callable that gets
        the request's JSON body and returns either."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def respond_with(self, reply: Script) -> FakeLLMServer:
        """The reply once the queue is empty (without one, an empty queue answers 400)."""
        with self._lock:
            self.default = reply
        return self

    def fail(self, status: int, times: int = 1, *, message: str | None = None,
             retry_after_ms: float | None = 1, headers: dict[str, str] | None = None) -> FakeLLMServer:
        """The next ``times`` requests get an HTTP error ``status`` (before any scripted reply).
        ``retry_after_ms`` keeps the SDK's retry backoff tiny (None: the SDK's own backoff)."""
        h = dict(headers or {})
        if retry_after_ms is not None:
            h["retry-after-ms"] = str(retry_after_ms)
        with self._lock:
            self._failures.extend([(status, message, h)] * times)
        return self

    def delay(self, seconds: float, times: int | None = None) -> FakeLLMServer:
        """Wait before answering: the next ``times`` requests, or every request (None)."""
        with self._lock:
            if times is None:
                self._delay_all = seconds
            else:
                self._delays.extend([seconds] * times)
        return self

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1]

    # -- the server side ------------------------------------------------------------------

    def _handle(self, request: Request) -> Response:
        try:
            body = json.loads(request.get_data(as_text=True) or "{}")
        except json.JSONDecodeError:
            body = {}
        with self._lock:
            gen = self.generation
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            wait = self._delays.popleft() if self._delays else self._delay_all
            error: tuple[int, str | None, dict[str, str]] | None = None
            reply: Script | None = None
            key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            model = str(body.get("model", ""))
            if self.api_key is not None and key != self.api_key:
                error = (401, "invalid x-api-key" if self.api == "anthropic" else "Incorrect API key provided", {})
            elif self.known_models is not None and model not in self.known_models:
                error = (404, f"model: {model}", {})
            elif self._failures:
                error = self._failures.popleft()
            elif self._queue:
                reply = self._queue.popleft()
            elif self.default is not None:
                reply = self.default
            else:
                error = (400, "fake server: no scripted reply left for this request", {"x-should-retry": "false"})
        try:
            if wait:
                time.sleep(wait)
            if error is not None:
                return self._error(*error)
            if callable(reply):
                reply = reply(body)
            if isinstance(reply, str):
                reply = Reply(reply)
            assert isinstance(reply, Reply), f"scripted reply must be a str or Reply, not {type(reply)}"
            out = self._anthropic(body, reply) if self.api == "anthropic" else self._openai(body, reply)
            return Response(json.dumps(out), status=200, content_type="application/json",
                            headers={"request-id": f"req_fake_{next(self._ids)}"})
        finally:
            with self._lock:
                if gen == self.generation:
                    self.in_flight -= 1

    def _error(self, status: int, message: str | None, headers: dict[str, str]) -> Response:
        if self.api == "anthropic":
            kind = _ANTHROPIC_ERRORS.get(status, "api_error")
            payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message or kind}}
        else:
            kind = _OPENAI_ERRORS.get(status, "server_error")
            payload = {"error": {"message": message or kind, "type": kind, "param": None, "code": kind}}
        return Response(json.dumps(payload), status=status, content_type="application/json", headers=headers)

    def _reply_model(self, body: dict[str, Any], reply: Reply) -> str:
        return reply.model or self.model or f"scripted-{body.get('model', 'model')}"

    def _anthropic(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        system = body.get("system") or []
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        cached_text = "".join(b.get("text", "") for b in system if b.get("cache_control"))
        plain_system = "".join(b.get("text", "") for b in system if not b.get("cache_control"))
        messages_text = "".join(
            m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in body.get("messages", [])
        )
        cache_write = cache_read = 0
        if cached_text:
            with self._lock:
                if cached_text in self._seen_prefixes:
                    cache_read = _tokens(cached_text)
                else:
                    self._seen_prefixes.add(cached_text)
                    cache_write = _tokens(cached_text)
        content: list[dict[str, Any]] = []
        thinking = body.get("thinking") or {}
        if reply.thinking is not None or thinking.get("type") == "enabled":
            content.append({"type": "thinking", "thinking": reply.thinking or "Let me think about the kernel.",
                            "signature": "fake-signature"})
        content.append({"type": "text", "text": reply.text})
        return {
            "id": f"msg_fake_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": self._reply_model(body, reply),
            "content": content,
            "stop_reason": reply.stop_reason or "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": _tokens(plain_system + messages_text),
                "output_tokens": reply.output_tokens if reply.output_tokens is not None else _tokens(reply.text),
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
            },
        }

    def _openai(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        messages = body.get("messages", [])
        system = "".join(m.get("content") or "" for m in messages if m.get("role") == "system")
        rest = "".join(m.get("content") or "" for m in messages if m.get("role") != "system")
        cached = 0
        if system:
            with self._lock:
                if system in self._seen_prefixes:
                    cached = _tokens(system)
                self._seen_prefixes.add(system)
        prompt = _tokens(system) + _tokens(rest)
        completion = reply.output_tokens if reply.output_tokens is not None else _tokens(reply.text)
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self._reply_model(body, reply),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": reply.stop_reason or "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        }


_SERVERS: dict[str, FakeLLMServer] = {}
_SERVERS_LOCK = threading.Lock()


def shared_server(api: str) -> FakeLLMServer:
    """The process-wide server for ``api``, started on first use (it lives as long as the process)."""
    with _SERVERS_LOCK:
        srv = _SERVERS.get(api)
        if srv is None:
            srv = _SERVERS[api] = FakeLLMServer(api).start()
        return srv


@pytest.fixture
def fake_anthropic() -> Iterator[FakeLLMServer]:
    srv = shared_server("anthropic")
    srv.reset()
    yield srv
    srv.reset()


@pytest.fixture
def fake_openai() -> Iterator[FakeLLMServer]:
    srv = shared_server("openai")
    srv.reset()
    yield srv
    srv.reset()
