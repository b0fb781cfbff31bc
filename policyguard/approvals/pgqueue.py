"""The approval queue on PostgreSQL: the same statements as SQLite's, in the tables beside a PostgresStore's.

Replicas of a guard (and the review console, and the ``approvals`` CLI) that
share a :class:`~policyguard.enforcement.pgstore.PostgresStore` share its queue: a request
escalated on one replica is approved anywhere and spent once everywhere. Each
state change is one ``UPDATE ... WHERE id = %s AND status = %s`` at READ
COMMITTED; PostgreSQL re-checks the ``WHERE`` on the row's newest version after
a concurrent update, so of racing reviewers exactly one changes the row. A
``seq`` column keeps requests created in the same instant in arrival order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from policyguard.enforcement.pgstore import PostgresStore

from .queue import QUEUE_SCHEMA_VERSION, ApprovalError, SQLApprovalQueue

_LOCK = 0x706751  # pg_advisory_xact_lock key: replicas starting together create the tables once

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS approvals_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS approval_requests (
        seq BIGSERIAL,
        id TEXT PRIMARY KEY,
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_sha256 TEXT NOT NULL,
        principal TEXT,
        policy_version TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        reviewer TEXT,
        reason TEXT,
        decided_at DOUBLE PRECISION,
        used_at DOUBLE PRECISION,
        used_call_id TEXT,
        grant_sha256 TEXT,
        body TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS approval_requests_by_status ON approval_requests (status, created_at)",
    "CREATE INDEX IF NOT EXISTS approval_requests_by_call ON approval_requests (tool, args_sha256, status)",
)


class PostgresApprovalQueue(SQLApprovalQueue):
    """An :class:`~policyguard.approvals.queue.ApprovalQueue` in a PostgreSQL store's database (and schema)."""

    _marker = "%s"
    _tiebreak = "seq"

    def __init__(self, store: PostgresStore, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock=clock)
        self.store = store
        with store.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            for statement in _SCHEMA:
                conn.execute(statement)  # type: ignore[arg-type]  # literal SQL from this module
            row = conn.execute("SELECT version FROM approvals_schema WHERE id = 1").fetchone()
            if row is None:
                conn.execute("INSERT INTO approvals_schema (id, version) VALUES (1, %s)", (QUEUE_SCHEMA_VERSION,))
            elif int(row[0]) > QUEUE_SCHEMA_VERSION:
                raise ApprovalError(
                    "schema",
                    f"{store.url}: approvals schema version {row[0]} is newer than this PolicyGuard "
                    f"({QUEUE_SCHEMA_VERSION})",
                )

    def _unstorable(self, text: str) -> bool:
        """PostgreSQL text holds no NUL and no lone surrogate: an id with either names no request."""
        if "\x00" in text:
            return True
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    def _transaction(self) -> AbstractContextManager[Any]:
        return self.store.transaction()

    def close(self) -> None:
        self.store.close()
