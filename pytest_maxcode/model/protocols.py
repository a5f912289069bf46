"""The interfaces the layers meet at, declared once: the three oracles (local, Ray, program)
and the store serve the search through these, and nothing else of theirs is relied on.

Protocols, not base classes: an oracle or a store written elsewhere (a plugin's, a test's)
needs only these members, and ``isinstance`` checks them at run time. This is the bottom
layer, so what the oracle layer owns (its configuration, its candidates) is named here by the
members read of it, never imported, not even for annotations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from .search import NodeRow
from .verdict import Verdict


class OracleSettings(Protocol):
    """What the search reads of an oracle's configuration (``oracle.check.CheckConfig``)."""

    @property
    def min_speedup(self) -> float: ...

    def key(self) -> str: ...


class Candidate(Protocol):
    """A candidate as an oracle takes it and the store keeps it (``oracle.check.CandidateSpec``)."""

    @property
    def format(self) -> str: ...

    @property
    def lang(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def hash(self) -> str: ...


#: the candidates an oracle checks: contravariant, so an oracle of ``CandidateSpec`` serves
#: wherever one of ``CandidateSpec`` is asked for
CandidateT = TypeVar("CandidateT", bound=Candidate, contravariant=True)


@runtime_checkable
class OracleLike(Protocol[CandidateT]):
    """Checks candidates against one reference. ``eval_key`` names everything that can change
    a verdict (the configuration, the reference, the machine): evaluations under one key are
    interchangeable, so the search resumes from them, and sets it once the workloads are known."""

    eval_key: str
    device: str

    @property
    def config(self) -> OracleSettings: ...

    @property
    def workloads(self) -> Sequence[Any]:
        """The reference's workloads, each the oracle's own type; filled in by ``prepare``."""
        ...

    def prepare(self) -> None:
        """Runs the reference once (its outputs are what candidates are checked against)."""
        ...

    def check(self, candidates: Sequence[CandidateT]) -> list[Verdict]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class EvaluationStore(Protocol):
    """Where verdicts and candidates persist between runs (``store.Store`` is the SQLite one):
    what an oracle records into it."""

    def upsert_target(self, target_id: str, kind: str, source_path: str, source_hash: str) -> None: ...

    def record_evaluation(self, *, run_id: int | None, target_id: str, config_key: str, device: str,
                          verdict: dict[str, Any]) -> int: ...

    def find_evaluation(self, target_id: str, candidate_hash: str, config_key: str) -> dict[str, Any] | None: ...

    def add_candidate(self, cand_hash: str, fmt: str, lang: str, source: str, origin: str) -> None: ...

    def candidate(self, cand_hash: str) -> dict[str, Any] | None: ...

    def nodes(self, target_id: str, run_id: int | None = None) -> list[dict[str, Any]]: ...


@runtime_checkable
class SearchStore(EvaluationStore, Protocol):
    """The store as the search uses it: an evaluation store (the search hands it to its oracle
    and resumes from its verdicts) that also keeps the search tree and the LLM calls' totals."""

    def add_node(self, row: NodeRow) -> int: ...

    def llm_totals(self, *, run_id: int | None = None, target_id: str | None = None) -> dict[str, float]: ...
