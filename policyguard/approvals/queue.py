"""The approval queue: calls waiting for a person's yes or no, and what that person decided.

When only *approvable* requirements fail, the guard records an
:class:`ApprovalRequest` here instead of blocking for good. A reviewer (the
``policyguard approvals`` CLI, the review console) reads the request - the
exact call, every requirement's result with its evidence and the policy
sentence it quotes, the remediation, a dialogue excerpt - and approves or
denies it. Each decision is one atomic state change, so of two reviewers
racing on one request exactly one wins.

Status moves only forward::

    pending -> approved -> used      (the approved call ran once)
    pending -> denied                (final for that call: its call id is also denied in the store)
    pending | approved -> expired    (``expires_at`` passed; read as expired at once)

No secret is stored: the grant issued for an approved call is kept as its
sha256 only (``grant_sha256``), the request id is a reference.

:class:`ApprovalQueue` is the contract; :class:`SQLApprovalQueue` holds its
statements. :class:`SQLiteApprovalQueue` keeps its own tables (versioned in
``approvals_schema``) in a :class:`~policyguard.enforcement.store.SQLiteStore` file, and
:class:`~policyguard.approvals.pgqueue.PostgresApprovalQueue` the same tables in a
PostgreSQL store's database, shared by replicas. Both open by URL with
:func:`policyguard.enforcement.storeurl.open_approvals`.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from policyguard.decision import Status
from policyguard.enforcement.store import SQLiteStore
from policyguard.errors import PolicyGuardError

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "used"]
STATUSES: tuple[ApprovalStatus, ...] = ("pending", "approved", "denied", "expired", "used")
QUEUE_SCHEMA_VERSION = 1
DEFAULT_TTL_S = 24 * 3600.0
"""How long a request (and an approval given for it) stays usable when the guard sets no other expiry."""


class ApprovalError(PolicyGuardError):
    """A queue operation was refused. ``reason``: ``not_found``, ``not_pending``, ``not_approved``, ``expired``,
    ``reviewer``, ``duplicate``, ``schema`` or ``corrupt`` (a stored record that does not read back)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class RequirementView(BaseModel):
    """One requirement's result as the reviewer sees it: status, evidence and the policy sentence it quotes."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: Status
    evidence: str | None = None
    judged_by: Literal["gate", "verifier", "none"] = "none"
    text: str | None = Field(default=None, description="The requirement as the checklist states it.")
    source: str | None = Field(default=None, description="The policy sentence the requirement quotes.")
    approvable: bool = Field(default=False, description="Whether a person may approve a failure of it.")


class DialogueLine(BaseModel):
    """One message of the dialogue excerpt (content shortened; tool calls as ``name(args)``)."""

    model_config = ConfigDict(extra="forbid")

    role: str
    content: str = ""
    name: str | None = None


class ApprovalRequest(BaseModel):
    """A pending call that needs a person's approval, and that person's decision."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: "apr-" + secrets.token_hex(12))
    call_id: str
    tool: str
    arguments: dict[str, Any]
    args_sha256: str
    principal: str | None = None
    policy_version: str
    requirements: list[RequirementView] = Field(default_factory=list)
    remediation: str | None = None
    dialogue: list[DialogueLine] = Field(default_factory=list)
    created_at: float = Field(default_factory=time.time)
    expires_at: float
    status: ApprovalStatus = "pending"
    reviewer: str | None = None
    reason: str | None = None
    decided_at: float | None = None
    used_at: float | None = None
    used_call_id: str | None = Field(default=None, description="The call id the approval was spent on.")
    grant_sha256: str | None = Field(default=None, description="sha256 of the grant issued for it (never the grant).")

    @property
    def failed(self) -> list[RequirementView]:
        """The requirements that did not hold (NOT_MET or UNVERIFIED): what the reviewer is asked to waive."""
        return [r for r in self.requirements if r.status in ("NOT_MET", "UNVERIFIED")]


@runtime_checkable
class ApprovalQueue(Protocol):
    """Where approval requests wait and where reviewers' decisions are recorded. Every method is atomic."""

    def submit(self, request: ApprovalRequest) -> ApprovalRequest:
        """Store a new pending request (its id must be new) and return it."""
        ...

    def get(self, request_id: str) -> ApprovalRequest | None:
        """The request, with ``expired`` already applied; None when unknown."""
        ...

    def pending(self, limit: int | None = None) -> list[ApprovalRequest]:
        """Unexpired pending requests, oldest first."""
        ...

    def all(
        self,
        *,
        status: ApprovalStatus | None = None,
        tool: str | None = None,
        principal: str | None = None,
        args_sha256: str | None = None,
        policy_version: str | None = None,
        limit: int | None = None,
    ) -> list[ApprovalRequest]:
        """Requests matching every filter given, oldest first."""
        ...

    def approve(self, request_id: str, reviewer: str, reason: str | None = None) -> ApprovalRequest:
        """pending -> approved; ApprovalError if the request is unknown, decided or expired."""
        ...

    def deny(self, request_id: str, reviewer: str, reason: str | None = None) -> ApprovalRequest:
        """pending -> denied (final); ApprovalError if the request is unknown, decided or expired."""
        ...

    def use(self, request_id: str, call_id: str, grant_sha256: str | None) -> ApprovalRequest:
        """approved -> used, once: the approval is spent on ``call_id``. ApprovalError otherwise."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_requests (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_sha256 TEXT NOT NULL,
    principal TEXT,
    policy_version TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    reviewer TEXT,
    reason TEXT,
    decided_at REAL,
    used_at REAL,
    used_call_id TEXT,
    grant_sha256 TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approval_requests_by_status ON approval_requests (status, created_at);
CREATE INDEX IF NOT EXISTS approval_requests_by_call ON approval_requests (tool, args_sha256, status)
"""

_COLUMNS = (
    "id",
    "call_id",
    "tool",
    "args_sha256",
    "principal",
    "policy_version",
    "status",
    "created_at",
    "expires_at",
    "reviewer",
    "reason",
    "decided_at",
    "used_at",
    "used_call_id",
    "grant_sha256",
)
_BODY_FIELDS = ("arguments", "requirements", "remediation", "dialogue")
_SELECT = f"SELECT {', '.join(_COLUMNS)}, body FROM approval_requests"


class SQLApprovalQueue:
    """The queue's statements, shared by the SQLite and the PostgreSQL binding.

    Every state change is one ``UPDATE ... WHERE id = ? AND status = ?`` inside
    a transaction: of two reviewers racing on one request the database lets
    exactly one update a row. A subclass supplies the transaction, the
    parameter marker and the column that breaks ties in creation order.
    """

    _marker = "?"
    _tiebreak = "rowid"

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text if self._marker == "?" else text.replace("?", self._marker)

    def _unstorable(self, text: str) -> bool:
        """Whether no stored request can have this id (the database cannot hold the text)."""
        return False

    def close(self) -> None:
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------

    def _expire(self, conn: Any) -> None:
        conn.execute(
            self._sql(
                "UPDATE approval_requests SET status = 'expired' WHERE status IN ('pending', 'approved') "
                "AND expires_at <= ?"
            ),
            (self._clock(),),
        )

    def _row(self, conn: Any, request_id: str) -> ApprovalRequest | None:
        row = conn.execute(self._sql(f"{_SELECT} WHERE id = ?"), (request_id,)).fetchone()
        return _request(tuple(row)) if row is not None else None

    def _decide(
        self, request_id: str, *, old: ApprovalStatus, new: ApprovalStatus, updates: dict[str, Any]
    ) -> ApprovalRequest:
        if self._unstorable(request_id):
            raise ApprovalError("not_found", f"no approval request {request_id!r}")
        sets = ", ".join(f"{name} = ?" for name in updates)
        with self._transaction() as conn:
            self._expire(conn)
            cursor = conn.execute(
                self._sql(f"UPDATE approval_requests SET status = ?, {sets} WHERE id = ? AND status = ?"),
                (new, *updates.values(), request_id, old),
            )
            changed = cursor.rowcount == 1
            if new == "denied" and changed:  # deny wins at the executor too (the store's denials)
                conn.execute(
                    self._sql(
                        "INSERT INTO denials (call_id, denied_at) SELECT call_id, ? FROM approval_requests "
                        "WHERE id = ? ON CONFLICT DO NOTHING"
                    ),
                    (self._clock(), request_id),
                )
            found = self._row(conn, request_id)
        if found is None:
            raise ApprovalError("not_found", f"no approval request {request_id!r}")
        if not changed:
            reason = "expired" if found.status == "expired" else f"not_{old}"
            raise ApprovalError(reason, f"approval request {request_id} is {found.status}, not {old}")
        return found

    # -- ApprovalQueue -------------------------------------------------------

    def submit(self, request: ApprovalRequest) -> ApprovalRequest:
        if request.status != "pending":
            raise ApprovalError("not_pending", f"a new approval request must be pending, not {request.status}")
        record = request.model_dump()
        body = json.dumps({name: record[name] for name in _BODY_FIELDS}, ensure_ascii=False, allow_nan=False)
        with self._transaction() as conn:
            cursor = conn.execute(
                self._sql(
                    f"INSERT INTO approval_requests ({', '.join(_COLUMNS)}, body) "
                    f"VALUES ({', '.join('?' for _ in _COLUMNS)}, ?) ON CONFLICT (id) DO NOTHING"
                ),
                (*(record[name] for name in _COLUMNS), body),
            )
            if cursor.rowcount != 1:
                raise ApprovalError("duplicate", f"approval request {request.id} already exists")
        return request

    def get(self, request_id: str) -> ApprovalRequest | None:
        if self._unstorable(request_id):
            return None
        with self._transaction() as conn:
            self._expire(conn)
            return self._row(conn, request_id)

    def pending(self, limit: int | None = None) -> list[ApprovalRequest]:
        return self.all(status="pending", limit=limit)

    def all(
        self,
        *,
        status: ApprovalStatus | None = None,
        tool: str | None = None,
        principal: str | None = None,
        args_sha256: str | None = None,
        policy_version: str | None = None,
        limit: int | None = None,
    ) -> list[ApprovalRequest]:
        filters = {
            "status": status,
            "tool": tool,
            "principal": principal,
            "args_sha256": args_sha256,
            "policy_version": policy_version,
        }
        used = {name: value for name, value in filters.items() if value is not None}
        sql = _SELECT
        if used:
            sql += " WHERE " + " AND ".join(f"{name} = ?" for name in used)
        sql += f" ORDER BY created_at, {self._tiebreak}"
        params: list[Any] = list(used.values())
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, int(limit)))
        with self._transaction() as conn:
            self._expire(conn)
            rows = conn.execute(self._sql(sql), params).fetchall()
        return [_request(tuple(row)) for row in rows]

    def approve(self, request_id: str, reviewer: str, reason: str | None = None) -> ApprovalRequest:
        _check_reviewer(reviewer)
        updates = {"reviewer": reviewer, "reason": reason, "decided_at": self._clock()}
        return self._decide(request_id, old="pending", new="approved", updates=updates)

    def deny(self, request_id: str, reviewer: str, reason: str | None = None) -> ApprovalRequest:
        _check_reviewer(reviewer)
        updates = {"reviewer": reviewer, "reason": reason, "decided_at": self._clock()}
        return self._decide(request_id, old="pending", new="denied", updates=updates)

    def use(self, request_id: str, call_id: str, grant_sha256: str | None) -> ApprovalRequest:
        updates = {"used_at": self._clock(), "used_call_id": call_id, "grant_sha256": grant_sha256}
        return self._decide(request_id, old="approved", new="used", updates=updates)


class SQLiteApprovalQueue(SQLApprovalQueue):
    """An :class:`ApprovalQueue` in the tables ``approval_requests`` and ``approvals_schema`` of a SQLite store.

    Shares the store's connections (so ``sqlite:///:memory:`` works and a
    store file holds nonces, ledger and approvals together). Transactions are
    ``BEGIN IMMEDIATE``: atomic across threads and processes. A file whose
    approvals schema is newer than this code is refused, not misread.
    """

    def __init__(self, store: SQLiteStore, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock=clock)
        self.store = store
        with store.transaction(immediate=True) as conn:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            row = conn.execute("SELECT version FROM approvals_schema WHERE id = 1").fetchone()
            if row is None:
                conn.execute("INSERT INTO approvals_schema (id, version) VALUES (1, ?)", (QUEUE_SCHEMA_VERSION,))
            elif row[0] > QUEUE_SCHEMA_VERSION:
                raise ApprovalError(
                    "schema",
                    f"{store.path}: approvals schema version {row[0]} is newer than this PolicyGuard "
                    f"({QUEUE_SCHEMA_VERSION})",
                )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.store.transaction(immediate=True)

    def close(self) -> None:
        self.store.close()


def _check_reviewer(reviewer: str) -> None:
    if not isinstance(reviewer, str) or not reviewer.strip():
        raise ApprovalError("reviewer", "a decision needs the reviewer's name")


def _request(row: tuple[Any, ...]) -> ApprovalRequest:
    """A stored row as a request; a row that does not read back whole is an error naming it, never half a request."""
    fields = dict(zip(_COLUMNS, row[:-1], strict=True))
    try:
        body = json.loads(row[-1])
        if not isinstance(body, dict) or set(body) != set(_BODY_FIELDS):
            raise ValueError(f"the body holds {sorted(body) if isinstance(body, dict) else type(body).__name__}")
        fields.update(body)
        return ApprovalRequest.model_validate(fields)
    except (ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0]
        raise ApprovalError("corrupt", f"approval request {fields.get('id')!r}: unreadable record: {first}") from None
