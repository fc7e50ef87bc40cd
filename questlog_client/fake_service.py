"""A stand-in for the outside world (a mail server, a booking system) that records every call it
gets in a SQLite file. Each call is committed before it answers, so a call made by an agent that is
killed a microsecond later is still on record: repeats are countable across process crashes.

It does not deduplicate anything on purpose: a side effect done twice shows up twice. `lookup`
answers whether a call with a given reference was made, which is what an agent's reconcile hook
asks after an attempt it never saw confirmed.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from questlog_client.models import Operation, Outcome

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    payload TEXT NOT NULL,
    ref TEXT,
    external_id TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_ref ON calls (ref);
"""


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def ref_for(op: Operation) -> str:
    """The idempotency reference an operation hands the external service (its ledger id)."""
    return f"questlog-op-{op.id}"


@dataclass(frozen=True)
class Call:
    id: int
    at: float
    kind: str
    target: str
    payload: dict[str, Any]
    ref: str | None
    external_id: str
    status: str

    @property
    def effect(self) -> tuple[str, str, str]:
        """What was done, independent of when and by whom: the identity repeats are counted by."""
        return (self.kind, self.target, canonical(self.payload))


class FakeService:
    """`FakeService(path)`; `call(kind, target, payload, ref=...)` does a side effect."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    def call(self, kind: str, target: str, payload: dict[str, Any], *, ref: str | None = None, status: str = "done") -> Outcome:
        """Do (pretend to do) a side effect and record it durably before answering."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute(
                "INSERT INTO calls (at, kind, target, payload, ref, external_id, status) VALUES (?, ?, ?, ?, ?, '', ?)",
                (time.time(), kind, target, canonical(payload), ref, status),
            )
            call_id = cur.lastrowid
            external_id = f"{kind.split('.')[0].upper()}-{call_id:05d}"
            db.execute("UPDATE calls SET external_id = ? WHERE id = ?", (external_id, call_id))
            db.execute("COMMIT")
        finally:
            db.close()
        return Outcome(external_id=external_id, external_status=status, receipt={"kind": kind, "target": target, "ref": ref})

    def effect(self, kind: str, target: str, payload: dict[str, Any], *, status: str = "done"):
        """A side effect for `run.operation(...)(...)`, carrying the operation's reference."""
        return lambda op: self.call(kind, target, payload, ref=ref_for(op), status=status)

    def lookup(self, op: Operation) -> Outcome | None:
        """A reconcile hook: did the call for this operation happen? Its outcome, or None."""
        with closing(self._connect()) as db:
            row = db.execute("SELECT kind, target, ref, external_id, status FROM calls WHERE ref = ? ORDER BY id LIMIT 1", (ref_for(op),)).fetchone()
        if row is None:
            return None
        kind, target, ref, external_id, status = row
        return Outcome(external_id=external_id, external_status=status, receipt={"kind": kind, "target": target, "ref": ref})

    def calls(self) -> list[Call]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT id, at, kind, target, payload, ref, external_id, status FROM calls ORDER BY id").fetchall()
        return [Call(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6], r[7]) for r in rows]

    def effects(self) -> Counter[tuple[str, str, str]]:
        return Counter(call.effect for call in self.calls())
