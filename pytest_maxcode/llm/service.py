"""The one door the search uses to reach a model: concurrency limit, response cache, accounting.

``LLMService.complete`` is called from many threads at once. It

1. answers from the store when exactly this request (``LLMRequest.key``: provider, model,
   prompt, sampling parameters and sample index) was answered before: ``source="cache"``, no
   HTTP request, no tokens, no cost;
2. otherwise waits for one of ``concurrency`` slots and asks the client (an API, or a replayed
   cassette);
3. prices the reply, records every call (cache hits included) in the store's ``llm_calls``
   table, and sets ``response.call_id`` and ``response.cost_usd``.

SQLite connections cannot cross threads, so each calling thread opens its own ``Store``.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from ..errors import MaxcodeError
from ..store.sqlite import LLMCallRow, Store
from .base import LLMClient, LLMRequest, LLMResponse, is_scripted_model
from .cassette import RecordingClient
from .pricing import Prices


class LLMService:
    def __init__(self, client: LLMClient, *, store_path: Path | None, prices: Prices | None = None,
                 concurrency: int = 4, cache: bool = True, record: Path | None = None) -> None:
        if int(concurrency) < 1:
            raise MaxcodeError(f"--maxcode-llm-concurrency must be at least 1, not {concurrency}")
        self.client = client
        self.provider = client.provider
        self.model = client.model
        self.store_path = Path(store_path) if store_path is not None else None
        self.prices = prices if prices is not None else Prices()
        self.concurrency = int(concurrency)
        self.cache = bool(cache)
        self.recorder = RecordingClient(client, Path(record)) if record is not None else None
        self._backend: LLMClient = self.recorder if self.recorder is not None else client
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stores: list[Store] = []
        self._closed = False
        self.unpriced_models: set[str] = set()
        self._totals: dict[str, Any] = {
            "calls": 0, "api_calls": 0, "cache_hits": 0, "replayed": 0, "scripted_calls": 0,
            "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
            "tokens": 0, "cost_usd": 0.0,
        }

    # -- plumbing -------------------------------------------------------------------------

    def describe(self) -> str:
        return self._backend.describe()

    def _store(self) -> Store | None:
        if self.store_path is None:
            return None
        store = getattr(self._local, "store", None)
        if store is None:
            store = Store(self.store_path)  # migrations re-check the version under the write lock
            self._local.store = store
            with self._lock:
                self._stores.append(store)
        return store

    def _price(self, response: LLMResponse) -> float:
        models = [response.model] if response.scripted or is_scripted_model(response.model) else [response.model, self.model]
        for model in models:
            if model:
                cost = self.prices.cost(model, response)
                if cost is not None:
                    return cost
        with self._lock:
            self.unpriced_models.add(response.model or self.model)
        return 0.0

    @staticmethod
    def _from_row(row: dict[str, Any]) -> LLMResponse:
        return LLMResponse(
            text=row["response"],
            model=row["model"],
            source="cache",
            scripted=bool(row["scripted"]),
            extra={"cached_call_id": row["id"], "cached_source": row["source"],
                   "cached_usage": {k: row[k] for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                          "cache_write_tokens")}},
        )

    # -- the call -------------------------------------------------------------------------

    def complete(self, request: LLMRequest, *, run_id: int | None = None, target_id: str | None = None) -> LLMResponse:
        if self._closed:
            raise RuntimeError("LLMService.complete after close()")
        key = request.key(self.provider, self.model)
        store = self._store()
        response: LLMResponse | None = None
        if self.cache and store is not None:
            row = store.find_llm_response(key)
            if row is not None:
                response = self._from_row(row)
                if self.recorder is not None:
                    self.recorder.record(request, response)
        if response is None:
            with self._slots:
                response = self._backend.complete(request)
            response.scripted = response.scripted or is_scripted_model(response.model)
            response.cost_usd = self._price(response)
        if store is not None:
            response.call_id = store.add_llm_call(LLMCallRow(
                run_id=run_id, target_id=target_id, request_key=key, provider=self.provider,
                model=response.model or self.model, request=request.to_json(), response=response.text,
                source=response.source, scripted=response.scripted, input_tokens=response.input_tokens,
                output_tokens=response.output_tokens, cache_read_tokens=response.cache_read_tokens,
                cache_write_tokens=response.cache_write_tokens, cost_usd=response.cost_usd,
                latency_s=response.latency_s,
            ))
        with self._lock:
            t = self._totals
            t["calls"] += 1
            t["api_calls"] += response.source == "api"
            t["cache_hits"] += response.source == "cache"
            t["replayed"] += response.source == "replay"
            t["scripted_calls"] += bool(response.scripted)
            t["input_tokens"] += response.input_tokens
            t["output_tokens"] += response.output_tokens
            t["cache_read_tokens"] += response.cache_read_tokens
            t["cache_write_tokens"] += response.cache_write_tokens
            t["tokens"] += response.tokens
            t["cost_usd"] += response.cost_usd
        return response

    def totals(self) -> dict[str, Any]:
        """This service's calls so far: calls, api_calls, cache_hits, replayed, scripted_calls,
        tokens (input + output), the four token kinds, cost_usd (unpriced models count 0)."""
        with self._lock:
            return dict(self._totals)

    @property
    def scripted(self) -> bool:
        with self._lock:
            return self._totals["scripted_calls"] > 0

    def abort(self) -> None:
        """Fail the model's requests in flight now (Ctrl-C); ``close`` still runs afterwards."""
        abort = getattr(self.client, "abort", None)
        if abort is not None:
            abort()

    def close(self) -> None:
        """Finish the cassette, close the client. Per-thread store connections close here when
        this thread owns them, otherwise when their threads end."""
        if self._closed:
            return
        self._closed = True
        closer = self.recorder if self.recorder is not None else self.client
        close = getattr(closer, "close", None)
        if close is not None:
            close()
        with self._lock:
            stores, self._stores = self._stores, []
        for store in stores:
            try:
                store.close()
            except sqlite3.ProgrammingError:  # made in another thread; it closes with that thread
                pass

    def __enter__(self) -> LLMService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
