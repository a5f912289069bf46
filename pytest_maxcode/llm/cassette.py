"""Record and replay LLM conversations (JSONL cassettes).

A cassette is one JSON object per line. The first is the header::

    {"cassette": 1, "provider": "anthropic", "model": "claude-sonnet-4-6", "base_url": "...",
     "recorded_at": "2026-05-09T07:35:25+00:00", "tool_version": "0.1.0", "scripted": false}

then one line per reply, in the order they were served::

    {"key": "<LLMRequest.key>", "request": {...}, "response": {"text": ..., "model": ...,
     "input_tokens": ..., "output_tokens": ..., "cache_read_tokens": ..., "cache_write_tokens": ...,
     "stop_reason": ..., "scripted": false}}

Every line is appended and flushed as soon as its reply arrives, so a run killed at any moment
leaves a cassette that replays up to the kill (a torn last line is ignored). The header's
``scripted`` is ``null`` while recording and becomes true/false when the recorder closes; a
reader that finds ``null`` takes the answer from the lines (:func:`read_cassette` does both).
``scripted`` is true when any reply came from a test double (a server whose model is
``scripted-...``): such a cassette must never pass for a real model's work.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import MaxcodeError
from .base import _NUMBER, LLMClient, LLMRequest, LLMResponse, is_scripted_model

CASSETTE_VERSION = 1


def response_to_json(r: LLMResponse) -> dict[str, Any]:
    return {
        "text": r.text,
        "model": r.model,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cache_read_tokens": r.cache_read_tokens,
        "cache_write_tokens": r.cache_write_tokens,
        "stop_reason": r.stop_reason,
        "latency_s": round(r.latency_s, 4),
        "scripted": bool(r.scripted or is_scripted_model(r.model)),
    }


def response_from_json(d: dict[str, Any], *, source: str) -> LLMResponse:
    return LLMResponse(
        text=str(d["text"]),
        model=str(d.get("model", "")),
        input_tokens=int(d.get("input_tokens", 0)),
        output_tokens=int(d.get("output_tokens", 0)),
        cache_read_tokens=int(d.get("cache_read_tokens", 0)),
        cache_write_tokens=int(d.get("cache_write_tokens", 0)),
        stop_reason=str(d.get("stop_reason", "")),
        latency_s=0.0,
        source=source,
        scripted=bool(d.get("scripted", False)) or is_scripted_model(str(d.get("model", ""))),
        extra={"recorded_latency_s": float(d.get("latency_s", 0.0))},
    )


class RecordingClient:
    """Wraps any client; appends every request and reply it serves to a cassette at ``path``
    (overwriting what was there). Thread-safe."""

    def __init__(self, inner: LLMClient, path: Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self.provider = inner.provider
        self.model = inner.model
        self.base_url = getattr(inner, "base_url", None)
        self.scripted = False
        self.lines = 0
        self._lock = threading.Lock()
        self._header: dict[str, Any] = {
            "cassette": CASSETTE_VERSION,
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tool_version": __version__,
            "scripted": None,
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w", encoding="utf-8")
        except OSError as exc:
            raise MaxcodeError(f"cannot write the cassette {self.path} ({exc.strerror}): fix --maxcode-record") from None
        self._write(self._header)

    def _write(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
        self._f.flush()

    def describe(self) -> str:
        return f"{self.inner.describe()} (recording to {self.path})"

    def complete(self, request: LLMRequest) -> LLMResponse:
        response = self.inner.complete(request)
        self.record(request, response)
        return response

    def record(self, request: LLMRequest, response: LLMResponse) -> None:
        """Append one served reply (the service also records its cache hits here, so that a
        replay with an empty store sees every reply the recorded run saw)."""
        line = {"key": request.key(self.provider, self.model), "request": request.to_json(),
                "response": response_to_json(response)}
        with self._lock:
            if self._f.closed:
                return
            self._write(line)
            self.lines += 1
            self.scripted = self.scripted or line["response"]["scripted"]

    def abort(self) -> None:
        abort = getattr(self.inner, "abort", None)
        if abort is not None:
            abort()

    def close(self) -> None:
        """Flush, and settle the header's ``scripted`` (an atomic rewrite of the file)."""
        with self._lock:
            if self._f.closed:
                return
            self._f.close()
            self._header["scripted"] = self.scripted
            lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
            lines[0] = json.dumps(self._header, ensure_ascii=False, sort_keys=True) + "\n"
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(lines), encoding="utf-8")
            os.replace(tmp, self.path)
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


@dataclass
class Cassette:
    header: dict[str, Any]
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def scripted(self) -> bool:
        if self.header.get("scripted") is not None:
            return bool(self.header["scripted"])
        return any(e["response"].get("scripted") for e in self.entries)


def read_cassette(path: Path, *, label: str | None = None) -> Cassette:
    """Parse a cassette; any problem is one MaxcodeError line naming the option."""
    label = label or str(path)
    fix = f"re-record it with --maxcode-record {label}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MaxcodeError(f"replay:{label} does not exist: record one with --maxcode-record {label}, or fix --maxcode-llm") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MaxcodeError(f"replay:{label} cannot be read ({exc}): fix --maxcode-llm, or {fix}") from None
    lines = text.splitlines()
    if not lines:
        raise MaxcodeError(f"replay:{label} is empty, not a cassette: {fix}")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("cassette") != CASSETTE_VERSION or not header.get("provider") \
            or not header.get("model"):
        raise MaxcodeError(f"replay:{label} is not a maxcode cassette (bad header line): {fix}")
    cassette = Cassette(header)
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            ok = isinstance(entry, dict) and isinstance(entry.get("key"), str) \
                and isinstance(entry.get("response"), dict) and isinstance(entry["response"].get("text"), str)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            if i == len(lines) and not text.endswith("\n"):
                break  # a torn last line: the recording run was killed mid-write
            raise MaxcodeError(f"replay:{label} line {i} is not a recorded reply: {fix}")
        cassette.entries.append(entry)
    return cassette


class ReplayClient:
    """Serves recorded replies by request key; never touches the network. Identical requests
    get their recorded replies in recorded order (the last one again once they run out).

    A request whose exact key was not recorded is matched by its ``shape_key`` (the same
    prompt up to measured numbers): a replayed search re-measures its candidates, and the
    times it quotes back to the model are never the recorded ones to the last digit."""

    def __init__(self, path: Path, *, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or str(path)
        cassette = read_cassette(self.path, label=self.label)
        self.header = cassette.header
        self.provider = str(cassette.header["provider"])
        self.model = str(cassette.header["model"])
        self.base_url = cassette.header.get("base_url")
        self.scripted = cassette.scripted
        self._by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in cassette.entries:
            self._by_key[e["key"]].append(e["response"])
            shape = LLMRequest.from_json(e["request"]).shape_key(self.provider, self.model)
            self._by_key["shape:" + shape].append(e["response"])
        self._next: dict[str, int] = defaultdict(int)
        self._recorded = [LLMRequest.from_json(e["request"]) for e in cassette.entries]
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(v) for k, v in self._by_key.items() if not k.startswith("shape:"))

    def describe(self) -> str:
        return f"replay:{self.label} ({self.provider}:{self.model}{', scripted' if self.scripted else ''})"

    def complete(self, request: LLMRequest) -> LLMResponse:
        key = request.key(self.provider, self.model)
        with self._lock:
            replies = self._by_key.get(key)
            if not replies:
                key = "shape:" + request.shape_key(self.provider, self.model)
                replies = self._by_key.get(key)
            if not replies:
                raise MaxcodeError(
                    f"replay:{self.label} has no recorded reply for this request (the prompt changed{self._where(request)}); "
                    f"re-record it with --maxcode-record {self.label}"
                )
            i = self._next[key]
            self._next[key] = i + 1
            d = replies[min(i, len(replies) - 1)]
        return response_from_json(d, source="replay")

    def _where(self, request: LLMRequest) -> str:
        """The first line where the request parts from the closest recorded one."""
        def lines(r: LLMRequest) -> list[str]:
            return [ln for m in r.messages for ln in _NUMBER.sub("N", m.content).splitlines()]

        mine = lines(request)
        best, ratio = None, -1.0
        for r in self._recorded:
            q = difflib.SequenceMatcher(None, mine, lines(r), autojunk=False).quick_ratio()
            if q > ratio:
                best, ratio = r, q
        if best is None:
            return ""
        for a, b in zip(mine, lines(best)):
            if a != b:
                return f" at: {a.strip()[:100]!r}, recorded: {b.strip()[:100]!r}"
        return ""

    def close(self) -> None:
        pass
