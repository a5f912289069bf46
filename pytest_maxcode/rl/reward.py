"""The oracle as a reward function for RL fine-tuning (TRL's ``GRPOTrainer`` convention).

``reward(prompts=..., completions=..., **columns) -> list[float]``, one value per completion,
computed exactly as the search computes a node's reward (``search.reward.reward``: the
speedup when correct, at most parity when the check was weak or the timing undecided, the
failure tiers otherwise), so a policy trained on it is trained on
what the search ranks by. Code is taken from a completion with the search's ``parse_reply``;
a completion without usable code, or one that uses a technique its stage does not permit,
is a ``format`` failure and is never built.

One prepared ``Oracle`` (a warm worker holding the reference's inputs and expected outputs)
per problem, kept in an LRU cache across calls, since preparing one costs seconds and a
training run draws the same problems again and again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Union

from ..errors import MaxcodeError
from ..model.candidate import CandidateSpec
from ..model.verdict import Verdict
from ..oracle.check import CheckConfig, Oracle
from ..search.policy import materialize
from ..search.prompts import parse_reply
from ..search.reward import reward as search_reward
from .curriculum import Curriculum, permitted_reason
from .dataset import default_device
from .problems import RLProblem, cache_key, problem_id, resolve

SCALES = ("linear", "log")

#: a completion as TRL passes it: the text, or a conversation's messages (one message alone, too)
Completion = Union[str, Sequence[object], Mapping[str, object], None]


def completion_text(completion: Completion) -> str:
    """The text of a completion: a string, or TRL's conversational list of messages (the
    assistant's contents joined; content given as typed parts is read for its text)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for m in completion or []:
        if not isinstance(m, dict) or m.get("role", "assistant") != "assistant":
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def score(v: Verdict, scale: str = "linear") -> float:
    """The search's reward for ``v``; with ``scale="log"`` a correct one's speedup s becomes
    log2(1 + s): 1 at parity like the linear reward, always above the failure tiers (which
    stay as they are), and no longer dominated by the occasional huge speedup. A weak-check or
    undecided verdict is paid at most parity on either scale (the search's reward caps it), so
    a policy cannot learn to cache answers for the few inputs a weak check times it on."""
    r = search_reward(v)
    return math.log2(1.0 + r) if scale == "log" and v.correct else r


def format_verdict(why: str) -> Verdict:
    return Verdict(candidate="", status="format", reasons=[why])


class _Slot:
    """A cached oracle and the lock that keeps one check at a time on it."""

    def __init__(self, problem: RLProblem, oracle: Oracle) -> None:
        self.problem, self.oracle = problem, oracle
        self.lock = threading.Lock()
        self.users = 0  # calls that are using it: it is not evicted while any is
        self.verdicts: OrderedDict[str, Verdict] = OrderedDict()


class OracleReward:
    """A TRL reward function backed by the oracle; see the module docstring.

    Dataset columns it reads (each a list, one value per completion): ``problem`` (required:
    a KernelBench file, a captured target id, or an RLProblem), ``format`` ("native" or
    "compat"), ``lang`` ("cpp", "cuda" or "py"), ``permitted`` (technique names, or None for
    any). Without a ``permitted`` column, the ``curriculum`` (if any) says what is permitted,
    and is told about every correct completion. Anything else TRL passes is ignored.
    """

    def __init__(self, root: str | Path = ".", config: CheckConfig | None = None, *, device: str | None = None,
                 fmt: str = "native", scale: str = "linear", curriculum: Curriculum | None = None, max_oracles: int = 8,
                 concurrency: int = 1, reuse_verdicts: int = 4096, name: str = "maxcode_speedup",
                 progress: Callable[[str], None] | None = None) -> None:
        """``concurrency`` > 1 checks that many problems at once: more throughput, noisier
        timings (the search keeps timings alone on the machine). ``reuse_verdicts``: how many
        verdicts per problem are kept, so a completion sampled again gets the same reward
        without another build and timing (0: measure every time).

        Parameters because they are the oracle's settings and TRL's reward options side by side, all
        keyword-only with defaults.
        """
        if scale not in SCALES:
            raise ValueError(f"scale {scale!r}: expected one of {', '.join(SCALES)}")
        if fmt not in ("native", "compat"):
            raise ValueError(f"fmt {fmt!r}: expected native or compat")
        self.root = Path(root).expanduser().resolve()
        config = config or CheckConfig()
        if device is not None or config.device is None:
            config = dataclasses.replace(config, device=device or default_device())
        self.config = config
        self.device = str(config.device)
        self.fmt, self.scale, self.curriculum = fmt, scale, curriculum
        self.max_oracles = max(1, max_oracles)
        self.reuse_verdicts = max(0, reuse_verdicts)
        self.__name__ = name
        self.progress = progress
        self.last_verdicts: list[Verdict] = []
        self._problems: dict[str, RLProblem] = {}
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._slots_lock = threading.Lock()
        self.concurrency = max(1, concurrency)
        self._checks = threading.BoundedSemaphore(self.concurrency)
        self._pool: ThreadPoolExecutor | None = None

    # -- TRL's entry points --------------------------------------------------------------

    def __call__(self, prompts: Sequence[object] | None = None, completions: Sequence[Completion] | None = None,
                 **kwargs: Any) -> list[float]:
        return self.rewards(prompts, completions, **kwargs)

    def rewards(self, prompts: Sequence[object] | None = None, completions: Sequence[Completion] | None = None,
                **kwargs: Any) -> list[float]:
        verdicts = self.evaluate(completions or [], **kwargs)
        values = [score(v, self.scale) for v in verdicts]
        _log(kwargs, verdicts)
        return values

    async def acall(self, prompts: Sequence[object] | None = None, completions: Sequence[Completion] | None = None,
                    **kwargs: Any) -> list[float]:
        """The same rewards, computed in a thread: the event loop (TRL's other async reward
        functions, an async trainer's generation) goes on while candidates build and run."""
        return await asyncio.to_thread(self.rewards, prompts, completions, **kwargs)

    # -- evaluation ----------------------------------------------------------------------

    def evaluate(self, completions: Sequence[Completion], *, problem: Sequence[object] | None = None,
                 format: Sequence[str | None] | None = None, lang: Sequence[str | None] | None = None,
                 permitted: Sequence[Sequence[str] | None] | None = None, **_: object) -> list[Verdict]:
        """One verdict per completion, in order (``last_verdicts`` keeps them for inspection)."""
        n = len(completions)
        if problem is None:
            raise MaxcodeError("the reward needs a problem column (a KernelBench file or a captured target id per row)")
        columns = {"problem": problem, "format": format, "lang": lang, "permitted": permitted}
        for key, col in columns.items():
            if col is not None and len(col) != n:
                raise MaxcodeError(f"the {key} column has {len(col)} values for {n} completions")
        verdicts: list[Verdict | None] = [None] * n
        groups: dict[str, tuple[_Slot, list[tuple[int, CandidateSpec]]]] = {}
        held: list[_Slot] = []
        try:
            for i, completion in enumerate(completions):
                fmt = (format[i] if format is not None else None) or self.fmt
                cand_lang = (lang[i] if lang is not None else None) or ("py" if fmt == "compat" else _native(self.device))
                spec = self._problem(problem[i])
                code, why = parse_reply(completion_text(completion), fmt, cand_lang, spec.entry(fmt))
                if code is not None:
                    why = self._barred(spec, code, permitted[i] if permitted is not None else None, permitted is not None)
                if why is not None:
                    verdicts[i] = format_verdict(why)
                    continue
                # only a problem with code to check gets (and keeps busy) a prepared oracle
                slot = self._slot(spec, held)
                cand = _materialize(self.root / ".maxcode" / "rl" / "candidates" / _safe(spec.id), code, cand_lang)
                groups.setdefault(cache_key(spec), (slot, []))[1].append((i, cand))
            futures = [self._executor().submit(self._check, slot, items) for slot, items in groups.values()]
            for f in futures:
                for i, v in f.result():
                    verdicts[i] = v
        finally:
            self._release(held)
        done = [v for v in verdicts if v is not None]
        if self.curriculum is not None and permitted is None:
            for i, v in enumerate(done):
                self.curriculum.record(problem_id(problem[i]), v.correct)
        self.last_verdicts = done
        return done

    def _executor(self) -> ThreadPoolExecutor:
        with self._slots_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="maxcode-rl")
            return self._pool

    def _barred(self, problem: RLProblem, code: str, permitted: Sequence[str] | None, has_column: bool) -> str | None:
        if has_column:
            return permitted_reason(permitted, code) if permitted is not None else None
        return self.curriculum.barred(problem.id, code) if self.curriculum is not None else None

    def _check(self, slot: _Slot, items: list[tuple[int, CandidateSpec]]) -> list[tuple[int, Verdict]]:
        with slot.lock:
            known = {s.hash: slot.verdicts[s.hash] for _, s in items if s.hash in slot.verdicts}
            # equal completions in one group (GRPO samples often agree) are checked once
            todo = list({s.hash: s for _, s in items if s.hash not in known}.values())
            if todo:
                with self._checks:
                    for spec, v in zip(todo, slot.oracle.check(todo)):
                        known[spec.hash] = v
                if self.reuse_verdicts:
                    for spec in todo:
                        slot.verdicts[spec.hash] = known[spec.hash]
                    while len(slot.verdicts) > self.reuse_verdicts:
                        slot.verdicts.popitem(last=False)
            return [(i, known[s.hash]) for i, s in items]

    def _problem(self, problem: object) -> RLProblem:
        """What a row's ``problem`` names, resolved once (files are parsed, never run, here)."""
        key = cache_key(problem)
        found = self._problems.get(key)
        if found is None:
            found = self._problems[key] = resolve(problem, self.root)
        return found

    def _slot(self, spec: RLProblem, held: list[_Slot]) -> _Slot:
        """The problem's prepared oracle, from the cache or new; held (not evicted) until
        ``_release``, so a call with more problems than ``max_oracles`` still has them all."""
        key = cache_key(spec)
        with self._slots_lock:
            slot = self._slots.get(key)
            if slot is None:
                config = dataclasses.replace(self.config, atol=_first(self.config.atol, spec.atol),
                                             rtol=_first(self.config.rtol, spec.rtol))
                oracle = Oracle(spec.reference, config, self.root, progress=self.progress,
                                workloads=list(spec.workloads) if spec.workloads else None)
                try:
                    oracle.prepare()
                except BaseException:
                    oracle.close()
                    raise
                slot = self._slots[key] = _Slot(spec, oracle)
            self._slots.move_to_end(key)
            if not any(h is slot for h in held):
                slot.users += 1
                held.append(slot)
            return slot

    def _release(self, held: list[_Slot]) -> None:
        """Let go of a call's oracles, and close the least recently used idle ones over the bound."""
        with self._slots_lock:
            for slot in held:
                slot.users -= 1
            idle = [k for k, s in self._slots.items() if s.users == 0]
            evicted = [self._slots.pop(k) for k in idle[: max(0, len(self._slots) - self.max_oracles)]]
        for slot in evicted:
            with slot.lock:
                slot.oracle.close()

    @property
    def cached_problems(self) -> list[str]:
        return list(self._slots)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker and thread; the reward can still be called afterwards (it prepares anew)."""
        with self._slots_lock:
            slots, self._slots = list(self._slots.values()), OrderedDict()
            pool, self._pool = self._pool, None
        for slot in slots:
            with slot.lock:
                slot.oracle.close()
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> "OracleReward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncOracleReward(OracleReward):
    """The reward as an async callable, for trainers that await reward functions (TRL checks
    ``__call__`` for ``async`` since 1.x; older TRL checks only functions: use ``async_reward``)."""

    async def __call__(self, prompts: Sequence[object] | None = None, completions: Sequence[Completion] | None = None,  # type: ignore[override]
                        **kwargs: Any) -> list[float]:
        return await self.acall(prompts, completions, **kwargs)


def async_reward(reward: OracleReward, name: str | None = None) -> Callable[..., Awaitable[list[float]]]:
    """``reward`` as a plain ``async def`` function named ``name`` (default: the reward's):
    what any TRL version that takes async reward functions recognises (``inspect.iscoroutinefunction``)."""

    async def fn(prompts: Sequence[object] | None = None, completions: Sequence[Completion] | None = None,
                 **kwargs: Any) -> list[float]:
        return await reward.acall(prompts, completions, **kwargs)

    fn.__name__ = fn.__qualname__ = name or reward.__name__
    return fn


def _log(kwargs: Mapping[str, object], verdicts: list[Verdict]) -> None:
    """What TRL >= 1.x lets a reward function add to its logs: each completion's status, and
    the share that compiled and that were correct."""
    extra, metric = kwargs.get("log_extra"), kwargs.get("log_metric")
    if callable(extra):
        extra("maxcode_status", [v.status for v in verdicts])
    if callable(metric) and verdicts:
        metric("maxcode/correct", sum(v.correct for v in verdicts) / len(verdicts))
        metric("maxcode/compiled", sum(v.status not in ("format", "compile_error") for v in verdicts) / len(verdicts))


def _materialize(out_dir: Path, code: str, lang: str) -> CandidateSpec:
    try:
        return materialize(out_dir, code, lang, "rl")
    except FileNotFoundError:  # another call wrote the same file at the same moment: it is there now
        return materialize(out_dir, code, lang, "rl")


def _native(device: str) -> str:
    return "cuda" if device == "cuda" else "cpp"


def _first(a: float | None, b: float | None) -> float | None:
    return a if a is not None else b


def _safe(problem: str) -> str:
    return re.sub(r"[^\w.-]+", "_", problem)
