"""The LLM policy: one request per ask, sent concurrently, each reply parsed into a candidate.

A reply without usable code is still a proposal (a ``format`` failure, fed back like any
other result). Usage is charged to the budget as replies arrive; a provider that stays
unavailable after the SDK's retries ends the target's search with that reason.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..llm import LLMService, LLMUnavailable
from .budget import Budget
from .policy import materialize
from .prompts import PromptContext, build_request, parse_reply
from .state import Proposal, SearchState
from .strategy import Ask

SAMPLES_PER_SEED = 10_000


class LLMPolicy:
    name = "llm"

    def __init__(
        self,
        service: LLMService,
        ctx: PromptContext,
        out_dir: Path,
        *,
        observation: tuple[str, ...],
        budget: Budget,
        run_id: int | None,
        concurrency: int = 4,
        seed: int = 0,
    ) -> None:
        self.service = service
        self.ctx = ctx
        self.out_dir = out_dir
        self.observation = observation
        self.budget = budget
        self.run_id = run_id
        self.concurrency = max(1, concurrency)
        self.seed = seed
        self.origin = f"{service.client.provider}:{service.client.model}"
        self.samples: dict[tuple[Any, ...], int] = {}
        self.unavailable: str | None = None
        self.wait_s = 0.0  # wall time spent waiting for replies (the benchmark's "not overhead")
        self._lock = threading.Lock()

    def _sample(self, key: tuple[Any, ...]) -> int:
        with self._lock:
            n = self.samples.get(key, 0)
            self.samples[key] = n + 1
            # each seed draws from its own range of samples: other replies, other cache keys
            return n + SAMPLES_PER_SEED * self.seed

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        if self.unavailable or not asks:
            return []
        jobs = []
        for ask in asks:
            parts = self.observation if ask.observation is None else _parts(ask.observation)
            mode = ask.mode if ask.parent is not None else "initial"
            # the sample number is part of the request's key: asks that would repeat a prompt
            # get fresh replies, and a rerun of the same search meets the same keys (cache)
            sample = self._sample((ask.parent.index if ask.parent else None, mode, parts, ask.permitted))
            request = build_request(self.ctx, state, ask.parent, mode, parts, sample, ask.permitted)
            jobs.append((ask, mode, request))
        t0 = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs)))
        try:
            futures = [pool.submit(self._ask, request) for _, _, request in jobs]
            replies = [f.result() for f in futures]
        except BaseException:  # Ctrl-C: do not wait for the requests still in flight (a with-block would)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        self.wait_s += time.monotonic() - t0
        out = []
        for (ask, mode, request), resp in zip(jobs, replies):
            if resp is not None:
                out.append(self._proposal(ask, mode, request, resp))
        return out

    def _ask(self, request: Any) -> Any:
        try:
            resp = self.service.complete(request, run_id=self.run_id, target_id=self.ctx.target_id)
        except LLMUnavailable as e:
            self.unavailable = str(e)
            return None
        self.budget.charge_reply(resp)
        return resp

    def _proposal(self, ask: Ask, mode: str, request: Any, resp: Any) -> Proposal:
        code, error = parse_reply(resp.text, self.ctx.fmt, self.ctx.lang, self.ctx.entry)
        fmt = "program" if self.ctx.fmt == "program" else None
        spec = materialize(self.out_dir, code, self.ctx.lang, "llm", fmt) if code is not None else None
        # a scripted reply (a test server's, not a model's) says so wherever it is stored
        origin = f"{self.service.client.provider}:{resp.model}" if resp.scripted else self.origin
        return Proposal(
            spec, origin, {"sample": request.sample}, parent=ask.parent, mode=mode, error=error,
            llm_call_id=resp.call_id, tokens=resp.tokens, cost_usd=resp.cost_usd,
        )


def _parts(setting: str) -> tuple[str, ...]:
    from .observation import parse_observation

    return parse_observation(setting)
