"""How SDK failures reach the user: one line that names the option to change.

Both official SDKs (anthropic, openai) share one exception shape (they come from the same
generator), so one mapping serves both. Messages never carry the API key: every text that came
from outside (the server's error message, the socket error) is scrubbed of it.
"""

from __future__ import annotations

from typing import Any

from ..errors import MaxcodeError


class LLMUnavailable(MaxcodeError):
    """The endpoint is configured right but cannot answer now (rate limit, overload, server
    error, timeout) even after the SDK's retries: transient. The search stops the target with
    this message as the reason instead of ending the session."""


def one_line(text: str, *, secrets: tuple[str | None, ...] = (), limit: int = 300) -> str:
    text = " ".join(str(text).split())
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    msg = None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message")
        elif isinstance(err, str):
            msg = err
        if msg is None:
            msg = body.get("message")
    if msg is None:
        msg = getattr(exc, "message", None) or str(exc)
    return str(msg)


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, e.g. '[Errno 111] Connection refused'."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    text = str(seen) or type(seen).__name__
    return text


def map_sdk_error(exc: BaseException, sdk: Any, *, label: str, url: str, provider: str, model: str,
                  timeout: float, retries: int, secrets: tuple[str | None, ...]) -> MaxcodeError:
    """Turn one SDK exception into a one-line MaxcodeError (LLMUnavailable when transient).

    ``sdk`` is the SDK module (``anthropic`` or ``openai``); ``label`` names the endpoint the way
    the user spelled it (``anthropic:claude-sonnet-4-5``).

    Parameters because the one line names everything a user needs to act on (endpoint, provider,
    model, timeout, retries) and scrubs the secrets; all keyword-only.
    """
    spell = f"--maxcode-llm={provider}:MODEL" + ("@URL" if provider == "openai" else "")
    after = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""

    def line(text: str) -> str:
        return one_line(text, secrets=secrets)

    if isinstance(exc, sdk.APITimeoutError):
        return LLMUnavailable(line(
            f"{label} at {url} did not answer within {timeout:g} s{after}: raise --maxcode-llm-timeout, "
            f"or check --maxcode-llm"))
    if isinstance(exc, sdk.APIConnectionError):
        return MaxcodeError(line(
            f"cannot reach {label} at {url} ({_cause(exc)}): is the server up? check the URL in --maxcode-llm"))
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        msg = _server_message(exc)
        key_var = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
        if isinstance(exc, sdk.AuthenticationError):
            return MaxcodeError(line(
                f"{label} at {url} rejected the API key (401: {msg}): check {key_var}, or pick another --maxcode-llm"))
        if isinstance(exc, sdk.PermissionDeniedError):
            return MaxcodeError(line(
                f"{label} at {url} refused access (403: {msg}): check {key_var}'s permissions, or pick "
                f"another model with {spell}"))
        if isinstance(exc, sdk.NotFoundError):
            hint = " (an OpenAI-compatible URL usually ends in /v1)" if provider == "openai" and not url.endswith("/v1") else ""
            return MaxcodeError(line(
                f"{label}: {url} does not know model {model!r} (404: {msg}): pick a model with {spell}{hint}"))
        if isinstance(exc, sdk.RateLimitError):
            return LLMUnavailable(line(
                f"{label} is rate-limited (429: {msg}){after}: wait, lower --maxcode-llm-concurrency, "
                f"or raise --maxcode-llm-retries"))
        if isinstance(exc, sdk.InternalServerError) or status >= 500 or status in (408, 409):
            return LLMUnavailable(line(
                f"{label} at {url} is unavailable ({status}: {msg}){after}: try again later, "
                f"or raise --maxcode-llm-retries"))
        if status == 400 and "model" in msg.lower():
            return MaxcodeError(line(
                f"{label} at {url} refused model {model!r} (400: {msg}): pick a model with {spell}"))
        return MaxcodeError(line(f"{label} at {url} refused the request ({status}: {msg}): check --maxcode-llm"))
    return MaxcodeError(line(f"{label} failed ({type(exc).__name__}: {exc}): check --maxcode-llm"))
