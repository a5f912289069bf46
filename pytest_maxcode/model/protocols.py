"""The interfaces the layers meet at, declared once: the three oracles (local, Ray, program)
and the store serve the search through these, and nothing else of theirs is relied on.

Protocols, not base classes: an oracle or a store written elsewhere (a plugin's, a test's)
needs only these members, and ``isinstance`` checks them at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: this layer imports nothing of the package at run time
    from ..oracle.check import CandidateSpec, CheckConfig
    from .verdict import Verdict


@runtime_checkable
class OracleLike(Protocol):
    """Checks candidates against one reference. ``eval_key`` names everything that can change
    a verdict (the configuration, the reference, the machine): evaluations under one key are
    interchangeable, so the search resumes from them."""

    config: CheckConfig
    eval_key: str
    device: str

    def check(self, candidates: Sequence[CandidateSpec]) -> list[Verdict]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class EvaluationStore(Protocol):
    """Where verdicts and candidates persist between runs (``store.Store`` is the SQLite one)."""

    def record_evaluation(self, *, run_id: int | None, target_id: str, config_key: str, device: str,
                          verdict: dict[str, Any]) -> int: ...

    def find_evaluation(self, target_id: str, candidate_hash: str, config_key: str) -> dict[str, Any] | None: ...

    def add_candidate(self, cand_hash: str, fmt: str, lang: str, source: str, origin: str) -> None: ...

    def candidate(self, cand_hash: str) -> dict[str, Any] | None: ...

    def nodes(self, target_id: str, run_id: int | None = None) -> list[dict[str, Any]]: ...
