"""The LLM policy: one request per ask, sent concurrently, each reply parsed into a candidate.

A reply without usable code is still a proposal (a ``format`` failure, fed back like any
other result). Each request takes its place in the budget before it is sent, and an ask the
budget has no room for is not sent (the policy answers fewer asks); a reply settles its
place with its real usage. A provider that stays unavailable after the SDK's retries ends
the target's search with that reason.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..llm import LLMRequest, LLMResponse, LLMService, LLMUnavailable
from .budget import Budget, Reservation
from .observation import parse_observation
from .policy import materialize
from .prompts import PromptContext, build_request, parse_reply
from .state import Proposal, SearchState
from .strategy import Ask

SAMPLES_PER_SEED = 10_000
#: what makes two asks the same prompt: the parent's index, the mode, the observation, the permitted techniques
SampleKey = tuple[int | None, str, tuple[str, ...], tuple[str, ...] | None]


@dataclass(frozen=True)
class Job:
    """One ask on its way: its mode, its request and its place in the budget."""

    ask: Ask
    mode: str
    request: LLMRequest
    held: Reservation


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
        """Eight parameters because the loop wires each from a setting of its own (keyword-only
        past ``out_dir``); a record holding them would only move the list."""
        self.service = service
        self.ctx = ctx
        self.out_dir = out_dir
        self.observation = observation
        self.budget = budget
        self.run_id = run_id
        self.concurrency = max(1, concurrency)
        self.seed = seed
        self.origin = f"{service.client.provider}:{service.client.model}"
        self.samples: dict[SampleKey, int] = {}
        self.unavailable: str | None = None
        self.wait_s = 0.0  # wall time spent waiting for replies (the benchmark's "not overhead")
        self._lock = threading.Lock()
        budget.spends(asked=1)

    def _sample(self, key: SampleKey) -> int:
        with self._lock:
            n = self.samples.get(key, 0)
            self.samples[key] = n + 1
            # each seed draws from its own range of samples: other replies, other cache keys
            return n + SAMPLES_PER_SEED * self.seed

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        if self.unavailable or not asks:
            return []
        jobs = self._jobs(state, asks)
        if not jobs:
            return []
        t0 = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs)))
        try:
            futures = [pool.submit(self._ask, job) for job in jobs]
            replies = [f.result() for f in futures]
        except BaseException:  # Ctrl-C: do not wait for the requests still in flight (a with-block would)
            pool.shutdown(wait=False, cancel_futures=True)
            for job in jobs:
                job.held.release()  # the cancelled ones' places (a sent one's settles or releases itself)
            raise
        pool.shutdown()
        self.wait_s += time.monotonic() - t0
        return [self._proposal(job, resp) for job, resp in zip(jobs, replies) if resp is not None]

    def _jobs(self, state: SearchState, asks: list[Ask]) -> list[Job]:
        """A request for each ask the budget has room for, in order; the rest are not sent."""
        jobs: list[Job] = []
        held: Reservation | None = None
        try:
            for ask in asks:
                held = self.budget.reserve()
                if held is None:
                    break
                parts = self.observation if ask.observation is None else parse_observation(ask.observation)
                mode = ask.mode if ask.parent is not None else "initial"
                # the sample number is part of the request's key: asks that would repeat a prompt
                # get fresh replies, and a rerun of the same search meets the same keys (cache)
                sample = self._sample((ask.parent.index if ask.parent else None, mode, parts, ask.permitted))
                jobs.append(Job(ask, mode, build_request(self.ctx, state, ask.parent, mode, parts, sample, ask.permitted), held))
                held = None
        except BaseException:  # nothing is sent: every place taken goes back
            for h in [j.held for j in jobs] + ([held] if held is not None else []):
                h.release()
            raise
        return jobs

    def _ask(self, job: Job) -> LLMResponse | None:
        with job.held:
            try:
                resp = self.service.complete(job.request, run_id=self.run_id, target_id=self.ctx.target_id)
            except LLMUnavailable as e:
                self.unavailable = str(e)
                return None
            job.held.settle(resp)
        return resp

    def _proposal(self, job: Job, resp: LLMResponse) -> Proposal:
        code, error = parse_reply(resp.text, self.ctx.fmt, self.ctx.lang, self.ctx.entry)
        fmt = "program" if self.ctx.fmt == "program" else None
        spec = materialize(self.out_dir, code, self.ctx.lang, "llm", fmt) if code is not None else None
        # a scripted reply (a test server's, not a model's) says so wherever it is stored
        origin = f"{self.service.client.provider}:{resp.model}" if resp.scripted else self.origin
        return Proposal(
            spec, origin, {"sample": job.request.sample}, parent=job.ask.parent, mode=job.mode, error=error,
            llm_call_id=resp.call_id, tokens=resp.tokens, cost_usd=resp.cost_usd,
        )

