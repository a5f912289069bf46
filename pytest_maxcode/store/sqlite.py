"""The store: targets, candidates and evaluations in one SQLite file (WAL).

Every evaluation is written in its own transaction, so a run killed at any moment
leaves every finished evaluation readable and nothing half-written; the search resumes
from what is there. Schema changes are numbered migrations keyed on ``user_version``.

"The current verdict" of a candidate under a configuration is what ``current_evaluations``
points at, written in the same transaction as the verdict together with a digest of the
row: a row added behind the store's back (say a forged ``faster`` with the largest id) is
not current, and a current row edited afterwards no longer matches its digest and is not
reused (the candidate is evaluated again).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import MaxcodeError
from ..model.jsontypes import JSON
from ..model.search import NodeRow

#: the columns of an evaluation that its digest covers (all but its id)
EVALUATION_COLUMNS = (
    "run_id", "target_id", "candidate_hash", "config_key", "status", "speedup", "ci_low", "ci_high", "reference_s",
    "candidate_s", "compile_s", "eval_s", "weak_check", "device", "reasons", "diagnostics", "created_at",
)


def evaluation_digest(row: sqlite3.Row) -> str:
    """The sha256 of an evaluation row as stored (read back, so SQLite's own types are hashed)."""
    values = [row[c] for c in EVALUATION_COLUMNS]
    return hashlib.sha256(json.dumps([row["id"], *values]).encode()).hexdigest()


def _backfill_current(db: sqlite3.Connection) -> None:
    """An older store's current verdicts: its latest row per key, as it always read them."""
    rows = db.execute(
        "SELECT * FROM evaluations WHERE id IN (SELECT MAX(id) FROM evaluations GROUP BY target_id, candidate_hash, config_key)"
    ).fetchall()
    for row in rows:
        db.execute(
            "INSERT INTO current_evaluations(target_id, candidate_hash, config_key, evaluation_id, digest) VALUES (?, ?, ?, ?, ?)",
            (row["target_id"], row["candidate_hash"], row["config_key"], row["id"], evaluation_digest(row)),
        )


MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        command TEXT NOT NULL,
        tool_version TEXT NOT NULL,
        machine TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE targets (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        source_path TEXT NOT NULL,
        source_hash TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE candidates (
        hash TEXT PRIMARY KEY,
        format TEXT NOT NULL,
        lang TEXT NOT NULL,
        source TEXT NOT NULL,
        origin TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id),
        target_id TEXT NOT NULL REFERENCES targets(id),
        candidate_hash TEXT NOT NULL REFERENCES candidates(hash),
        config_key TEXT NOT NULL,
        status TEXT NOT NULL,
        speedup REAL,
        ci_low REAL,
        ci_high REAL,
        reference_s REAL,
        candidate_s REAL,
        compile_s REAL,
        eval_s REAL,
        weak_check INTEGER NOT NULL DEFAULT 0,
        device TEXT NOT NULL,
        reasons TEXT NOT NULL DEFAULT '[]',
        diagnostics TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL
    );
    CREATE INDEX evaluations_target ON evaluations(target_id, candidate_hash, config_key);
    """,
    # 2: search trees and LLM calls
    """
    CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id),
        target_id TEXT,
        request_key TEXT NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        request TEXT NOT NULL,
        response TEXT NOT NULL,
        source TEXT NOT NULL,
        scripted INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL NOT NULL DEFAULT 0,
        latency_s REAL NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
    );
    CREATE INDEX llm_calls_key ON llm_calls(request_key);
    CREATE TABLE nodes (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id),
        target_id TEXT NOT NULL,
        parent_id INTEGER REFERENCES nodes(id),
        strategy TEXT NOT NULL,
        policy TEXT NOT NULL,
        step INTEGER NOT NULL,
        depth INTEGER NOT NULL,
        origin TEXT NOT NULL,
        candidate_hash TEXT REFERENCES candidates(hash),
        status TEXT NOT NULL,
        reward REAL NOT NULL,
        speedup REAL,
        candidate_s REAL,
        reasons TEXT NOT NULL DEFAULT '[]',
        llm_call_id INTEGER REFERENCES llm_calls(id),
        critique TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX nodes_target ON nodes(target_id, run_id);
    """,
    # 3: who wrote each critique, and the claims in it that nothing measured
    """
    ALTER TABLE nodes ADD COLUMN critic TEXT;
    ALTER TABLE nodes ADD COLUMN critique_flags TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE nodes ADD COLUMN critique_call_id INTEGER REFERENCES llm_calls(id);
    """,
    # 4: how each run ended (running, finished, interrupted, killed), and whose process it was
    """
    ALTER TABLE runs ADD COLUMN status TEXT;
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    ALTER TABLE runs ADD COLUMN host TEXT;
    UPDATE runs SET status='finished' WHERE finished_at IS NOT NULL;
    """,
    # 5: the current verdict per (target, candidate, configuration), not the largest rowid
    """
    CREATE TABLE current_evaluations (
        target_id TEXT NOT NULL,
        candidate_hash TEXT NOT NULL,
        config_key TEXT NOT NULL,
        evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
        digest TEXT NOT NULL,
        PRIMARY KEY (target_id, candidate_hash, config_key)
    );
    """,
    # 6: older stores keep reading the rows they read before
    _backfill_current,
]

RUN_STATUSES = ("running", "finished", "interrupted", "killed")


def _node_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["reasons"] = json.loads(d["reasons"])
    d["critique_flags"] = json.loads(d["critique_flags"])
    return d


def default_path(root: Path) -> Path:
    return root / ".maxcode" / "maxcode.db"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class LLMCallRow:
    """One model call as the store keeps it: what was asked, what came back, from where, and
    what it cost; ``Store.add_llm_call`` takes it whole."""

    run_id: int | None
    target_id: str | None
    request_key: str
    provider: str
    model: str
    request: dict[str, JSON]
    response: str
    source: str  # "api", "cache", "replay"
    scripted: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class StoreDamaged(MaxcodeError):
    """The store file is not a readable SQLite database (torn, overwritten, not ours)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(f"{path} is damaged ({detail}): move it aside (mv {path} {path}.damaged) "
                         "and the next pytest --maxcode starts a fresh store")


def damage(path: Path) -> str | None:
    """Why the store file at ``path`` cannot be used, or None. The header is read before
    SQLite opens the file, since opening it may discard a torn -wal that is worth keeping."""
    try:
        with open(path, "rb") as f:
            header = f.read(16)
    except OSError:
        return None
    if header and header != b"SQLite format 3\x00":
        return "file is not a database"
    try:
        Store(path).close()
    except StoreDamaged as e:
        return e.detail
    return None


def move_aside(path: Path) -> Path:
    """Rename a damaged store (and its -wal/-shm) to ``<name>.damaged-<time>``, keeping it."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(dest.with_name(dest.name + suffix))
    return dest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class Store:
    """The small interface the rest of the package talks to; SQL stays in this file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        try:
            self._enable_wal()
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as e:
            self.db.close()
            # "file is not a database", "database disk image is malformed"; a locked or
            # unopenable file (OperationalError) is not damage, and is raised as it is
            if isinstance(e, sqlite3.OperationalError):
                raise
            raise StoreDamaged(path, str(e)) from None
        #: runs of this host left unfinished by a process that is gone, marked killed by begin_run
        self.killed: list[int] = []

    def _enable_wal(self, timeout: float = 30.0) -> None:
        """Switching a new file to WAL takes an exclusive lock and SQLite does not wait for it
        (no busy handler), so two first opens at once (threads or processes) retry here."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _migrate(self) -> None:
        if self.db.execute("PRAGMA user_version").fetchone()[0] >= len(MIGRATIONS):
            return
        # read the version again under the write lock: another connection (thread or
        # process) opening the same new file may have migrated it meanwhile
        with self._tx():
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            for i, sql in enumerate(MIGRATIONS[version:], start=version + 1):
                if callable(sql):
                    sql(self.db)
                else:
                    for stmt in [s for s in sql.split(";") if s.strip()]:
                        self.db.execute(stmt)
                self.db.execute(f"PRAGMA user_version={i}")

    def _tx(self):
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------------

    def begin_run(self, command: str, tool_version: str, machine: Mapping[str, JSON] | None = None) -> int:
        """A new run, ``running`` in this process; unfinished runs of processes gone from this
        host (SIGKILL, a crash, a power cut) are marked ``killed`` first (see ``killed``)."""
        host = socket.gethostname()
        with self._tx():
            rows = self.db.execute(
                "SELECT id, pid FROM runs WHERE finished_at IS NULL AND status='running' AND host=?", (host,)
            ).fetchall()
            self.killed = [int(r["id"]) for r in rows if r["pid"] is not None and not _alive(int(r["pid"]))]
            for run_id in self.killed:
                self.db.execute("UPDATE runs SET status='killed' WHERE id=?", (run_id,))
            cur = self.db.execute(
                "INSERT INTO runs(started_at, command, tool_version, machine, status, pid, host) VALUES (?, ?, ?, ?, 'running', ?, ?)",
                (_now(), command, tool_version, json.dumps(machine or {}), os.getpid(), host),
            )
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        """End a run: ``finished``, or ``interrupted`` (Ctrl-C; what finished is stored)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r}: expected one of {', '.join(RUN_STATUSES)}")
        with self._tx():
            self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (_now(), status, run_id))

    def run(self, run_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        return None if row is None else dict(row)

    # -- targets and candidates -------------------------------------------------------

    def upsert_target(self, target_id: str, kind: str, source_path: str, source_hash: str) -> None:
        with self._tx():
            self.db.execute(
                "INSERT INTO targets(id, kind, source_path, source_hash, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET kind=excluded.kind, source_path=excluded.source_path, "
                "source_hash=excluded.source_hash, updated_at=excluded.updated_at",
                (target_id, kind, source_path, source_hash, _now()),
            )

    def add_candidate(self, cand_hash: str, fmt: str, lang: str, source: str, origin: str) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR IGNORE INTO candidates(hash, format, lang, source, origin, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (cand_hash, fmt, lang, source, origin, _now()),
            )

    # -- evaluations ------------------------------------------------------------------

    def record_evaluation(self, *, run_id: int | None, target_id: str, config_key: str, device: str, verdict: dict[str, Any]) -> int:
        ci = verdict.get("speedup_ci") or [None, None]
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO evaluations(run_id, target_id, candidate_hash, config_key, status, speedup, ci_low, ci_high, "
                "reference_s, candidate_s, compile_s, eval_s, weak_check, device, reasons, diagnostics, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    target_id,
                    verdict["hash"],
                    config_key,
                    verdict["status"],
                    verdict.get("speedup"),
                    ci[0],
                    ci[1],
                    verdict.get("reference_s"),
                    verdict.get("candidate_s"),
                    verdict.get("compile_s"),
                    verdict.get("eval_s"),
                    int(bool(verdict.get("weak_check"))),
                    device,
                    json.dumps(verdict.get("reasons", [])),
                    # the sandbox in force rides with the diagnostics: a resumed verdict still names it
                    json.dumps(dict(verdict.get("diagnostics") or {}, **({"sandbox": verdict["sandbox"]} if verdict.get("sandbox") else {}))),
                    _now(),
                ),
            )
            eval_id = int(cur.lastrowid)
            row = self.db.execute("SELECT * FROM evaluations WHERE id=?", (eval_id,)).fetchone()
            self.db.execute(
                "INSERT INTO current_evaluations(target_id, candidate_hash, config_key, evaluation_id, digest) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(target_id, candidate_hash, config_key) DO UPDATE SET "
                "evaluation_id=excluded.evaluation_id, digest=excluded.digest",
                (target_id, verdict["hash"], config_key, eval_id, evaluation_digest(row)),
            )
        return eval_id

    def find_evaluation(self, target_id: str, candidate_hash: str, config_key: str) -> dict[str, Any] | None:
        """The current evaluation of this candidate under this configuration: the one the store
        recorded as current, never merely the largest id; None when there is none, or when that
        row was changed since it was written (then the candidate is evaluated again)."""
        row = self.db.execute(
            "SELECT e.*, c.digest AS current_digest FROM current_evaluations c JOIN evaluations e ON e.id = c.evaluation_id "
            "WHERE c.target_id=? AND c.candidate_hash=? AND c.config_key=?",
            (target_id, candidate_hash, config_key),
        ).fetchone()
        if row is None or row["current_digest"] != evaluation_digest(row):
            return None
        if (row["target_id"], row["candidate_hash"], row["config_key"]) != (target_id, candidate_hash, config_key):
            return None
        d = dict(row)
        d.pop("current_digest")
        d["reasons"] = json.loads(d["reasons"])
        d["diagnostics"] = json.loads(d["diagnostics"])
        return d

    def evaluations(self, target_id: str | None = None) -> Iterator[dict[str, Any]]:
        sql = "SELECT * FROM evaluations"
        args: tuple = ()
        if target_id is not None:
            sql += " WHERE target_id=?"
            args = (target_id,)
        for row in self.db.execute(sql + " ORDER BY id", args):
            d = dict(row)
            d["reasons"] = json.loads(d["reasons"])
            d["diagnostics"] = json.loads(d["diagnostics"])
            yield d


    # -- LLM calls ------------------------------------------------------------------------

    def add_llm_call(self, row: LLMCallRow) -> int:
        """One row per call, cache hits included (source 'cache', no cost): the accounting record."""
        r = row
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO llm_calls(run_id, target_id, request_key, provider, model, request, response, source, scripted, "
                "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, latency_s, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.run_id, r.target_id, r.request_key, r.provider, r.model, json.dumps(r.request, sort_keys=True), r.response,
                 r.source, int(r.scripted), r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens,
                 r.cost_usd, r.latency_s, _now()),
            )
        return int(cur.lastrowid)

    def find_llm_response(self, request_key: str) -> dict[str, Any] | None:
        """The latest reply a model really gave to exactly this request (cache hits don't count twice)."""
        row = self.db.execute(
            "SELECT * FROM llm_calls WHERE request_key=? AND source != 'cache' ORDER BY id DESC LIMIT 1", (request_key,)
        ).fetchone()
        return _llm_row(row) if row is not None else None

    def llm_call(self, call_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM llm_calls WHERE id=?", (call_id,)).fetchone()
        return _llm_row(row) if row is not None else None

    def llm_totals(self, *, run_id: int | None = None, target_id: str | None = None) -> dict[str, float]:
        where, args = _where(run_id=run_id, target_id=target_id)
        row = self.db.execute(
            "SELECT COUNT(*) AS calls, COALESCE(SUM(source='api'), 0) AS api_calls, "
            "COALESCE(SUM(input_tokens + output_tokens), 0) AS tokens, COALESCE(SUM(cost_usd), 0) AS cost_usd "
            "FROM llm_calls" + where, args,
        ).fetchone()
        return dict(row)

    # -- search trees -------------------------------------------------------------------

    def add_node(self, row: NodeRow) -> int:
        r = row
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO nodes(run_id, target_id, parent_id, strategy, policy, step, depth, origin, candidate_hash, status, "
                "reward, speedup, candidate_s, reasons, llm_call_id, critique, critic, critique_flags, critique_call_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.run_id, r.target_id, r.parent_id, r.strategy, r.policy, r.step, r.depth, r.origin, r.candidate_hash, r.status,
                 r.reward, r.speedup, r.candidate_s, json.dumps(r.reasons), r.llm_call_id, r.critique, r.critic,
                 json.dumps(r.critique_flags), r.critique_call_id, _now()),
            )
        return int(cur.lastrowid)

    def nodes(self, target_id: str, run_id: int | None = None) -> list[dict[str, Any]]:
        """A target's search tree(s), oldest first; ``run_id`` None means every run."""
        where, args = _where(run_id=run_id, target_id=target_id)
        rows = self.db.execute("SELECT * FROM nodes" + where + " ORDER BY id", args).fetchall()
        return [_node_row(row) for row in rows]

    def node(self, node_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM nodes WHERE id=?", (node_id,)).fetchone()
        return None if row is None else _node_row(row)

    def candidate(self, cand_hash: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM candidates WHERE hash=?", (cand_hash,)).fetchone()
        return dict(row) if row is not None else None

    def evaluations_without_nodes(self, run_id: int) -> list[dict[str, Any]]:
        """This run's evaluations that no node records: those of a batch that Ctrl-C cut short
        (a batch's nodes are written when the whole batch is done). Only current verdicts, as
        written: a row slipped in under this run's id is not one."""
        rows = self.db.execute(
            "SELECT e.*, c.origin AS origin, cur.digest AS current_digest FROM evaluations e "
            "JOIN current_evaluations cur ON cur.evaluation_id = e.id AND cur.target_id = e.target_id "
            "AND cur.candidate_hash = e.candidate_hash AND cur.config_key = e.config_key "
            "LEFT JOIN candidates c ON c.hash = e.candidate_hash "
            "WHERE e.run_id=? AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.run_id = e.run_id "
            "AND n.target_id = e.target_id AND n.candidate_hash = e.candidate_hash) ORDER BY e.id",
            (run_id,),
        ).fetchall()
        out = []
        for row in rows:
            if row["current_digest"] != evaluation_digest(row):
                continue
            d = dict(row)
            d.pop("current_digest")
            d["reasons"] = json.loads(d["reasons"])
            d["diagnostics"] = json.loads(d["diagnostics"])
            out.append(d)
        return out

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM runs ORDER BY id")]

    def target_ids(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT target_id FROM nodes ORDER BY target_id")]


def _where(**conds: object) -> tuple[str, tuple]:
    parts = [(k, v) for k, v in conds.items() if v is not None]
    if not parts:
        return "", ()
    return " WHERE " + " AND ".join(f"{k}=?" for k, _ in parts), tuple(v for _, v in parts)


def _llm_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["request"] = json.loads(d["request"])
    d["scripted"] = bool(d["scripted"])
    return d


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (KeyboardInterrupt too)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")
