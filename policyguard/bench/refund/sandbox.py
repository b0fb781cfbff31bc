"""The payment sandbox: trusted reads, a refund API that is not idempotent, its SQLite ledger.

The sandbox stands in for the real payment service. Its refund endpoint moves
money on *every* request that reaches it (many payment APIs do not dedupe), so
safety against double refunds must come from the caller: one idempotency key
per transaction, claimed before sending, and a lookup by key before any retry
whose outcome is unknown. The ledger table is the ground truth the final-state
verifier reads; what the agent says happened does not count.

Transport faults are injected on the first refund request of a trial:
``request_not_reached`` fails before the service sees it; ``response_lost``
commits the refund and then times out.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from policyguard.checklist.schema import FactSource
from policyguard.enforcement.store import LedgerUnavailable
from policyguard.trajectory.canonical import sha256_hex

from .spec import Dataset, Fault

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trial_id TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    amount REAL NOT NULL,
    currency TEXT NOT NULL,
    idempotency_key TEXT,
    approval_id TEXT,
    created_at REAL NOT NULL
);
"""


class RefundRow(BaseModel):
    """One refund the sandbox executed (money left)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    trial_id: str
    transaction_id: str
    amount: float
    currency: str
    idempotency_key: str | None
    approval_id: str | None
    created_at: float


_COLUMNS = "seq, trial_id, transaction_id, amount, currency, idempotency_key, approval_id, created_at"


def _row(values: tuple[Any, ...]) -> RefundRow:
    return RefundRow.model_validate(dict(zip(_COLUMNS.split(", "), values, strict=True)))


class SandboxLedger:
    """The sandbox's writable ledger (one SQLite file per run, rows tagged by trial)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def record(self, trial_id: str, args: dict[str, Any]) -> RefundRow:
        with closing(self._connect()) as conn:
            cursor = conn.execute(
                "INSERT INTO refunds (trial_id, transaction_id, amount, currency, idempotency_key, approval_id,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    trial_id,
                    str(args["transaction_id"]),
                    float(args["amount"]),
                    str(args["currency"]),
                    args.get("idempotency_key"),
                    args.get("approval_id"),
                    time.time(),
                ),
            )
            seq = cursor.lastrowid
            row = conn.execute(f"SELECT {_COLUMNS} FROM refunds WHERE seq = ?", (seq,)).fetchone()
        return _row(row)

    def find(self, trial_id: str, idempotency_key: str) -> list[RefundRow]:
        with closing(self._connect()) as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM refunds WHERE trial_id = ? AND idempotency_key = ? ORDER BY seq",
                (trial_id, idempotency_key),
            ).fetchall()
        return [_row(r) for r in rows]


def read_ledger(path: str | Path, trial_id: str) -> list[RefundRow]:
    """Read-only access for the final-state verifier. Any failure is LedgerUnavailable (inconclusive)."""
    uri = f"file:{Path(path).resolve()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM refunds WHERE trial_id = ? ORDER BY seq", (trial_id,)
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise LedgerUnavailable(f"cannot read the sandbox ledger {path}: {exc}") from exc
    return [_row(r) for r in rows]


class TransportError(Exception):
    """The refund request's outcome is unknown to the caller (connection failed or timed out)."""


class PaymentSandbox:
    """One trial's view of the payment service: read endpoints and the refund endpoint."""

    def __init__(self, dataset: Dataset, ledger: SandboxLedger, trial_id: str, fault: Fault | None = None) -> None:
        self.dataset = dataset
        self.ledger = ledger
        self.trial_id = trial_id
        self.fault = fault
        self.requests_sent = 0
        self.requests_reached = 0
        self.rows: list[RefundRow] = []  # every refund this trial's requests committed, in order

    # -- read endpoints (trusted facts) ---------------------------------------

    def get_refund_policy(self, transaction_id: str) -> dict[str, Any]:
        record = self.dataset.refund_policies.get(transaction_id)
        if record is None:
            return {"transaction_id": transaction_id, "found": False, "refund_allowed": False}
        return {"transaction_id": transaction_id, "found": True, **record.model_dump()}

    def get_transaction(self, transaction_id: str) -> dict[str, Any]:
        record = self.dataset.transactions.get(transaction_id)
        if record is None:
            return {"transaction_id": transaction_id, "found": False, "captured": 0, "currency": ""}
        return {"transaction_id": transaction_id, "found": True, **record.model_dump()}

    def get_approval(self, approval_id: str) -> dict[str, Any]:
        """The approvals service's record, with the secret token replaced by its digest."""
        if not approval_id:
            return {"approval_id": "", "status": "none", "transaction_id": "", "amount": 0}
        record = self.dataset.approvals.get(approval_id)
        if record is None:
            return {"approval_id": approval_id, "status": "not_found", "transaction_id": "", "amount": 0}
        data = record.model_dump(exclude={"token"})
        return {"approval_id": approval_id, **data, "token_sha256": sha256_hex(record.token)}

    # -- the refund endpoint --------------------------------------------------

    def issue_refund(
        self,
        transaction_id: str,
        amount: float,
        currency: str,
        idempotency_key: str | None = None,
        approval_id: str | None = None,
    ) -> dict[str, Any]:
        """Move the money. Not idempotent: every request that arrives is a new refund."""
        self.requests_sent += 1
        first = self.requests_sent == 1
        if first and self.fault == "request_not_reached":
            raise TransportError("connection reset before the request reached the payment service")
        self.requests_reached += 1
        args = {
            "transaction_id": transaction_id,
            "amount": amount,
            "currency": currency,
            "idempotency_key": idempotency_key,
            "approval_id": approval_id,
        }
        row = self.ledger.record(self.trial_id, args)
        self.rows.append(row)
        if first and self.fault == "response_lost":
            raise TransportError("timed out waiting for the payment service's response")
        return {"status": "refunded", "refund_seq": row.seq, "transaction_id": transaction_id, "amount": amount}

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """The service's lookup-by-key endpoint: the refund committed under this key, if any."""
        rows = self.ledger.find(self.trial_id, idempotency_key)
        if not rows:
            return None
        row = rows[0]
        return {"status": "refunded", "refund_seq": row.seq, "transaction_id": row.transaction_id, "amount": row.amount}


class SandboxResolver:
    """The integrator's StateResolver: re-reads facts from the sandbox at execution time."""

    def __init__(self, sandbox: PaymentSandbox) -> None:
        self.sandbox = sandbox
        self.reads = 0

    def resolve(self, fact_name: str, source: FactSource, keys: dict[str, Any]) -> Any | None:
        self.reads += 1
        if source.tool == "get_refund_policy":
            return self.sandbox.get_refund_policy(str(keys["transaction_id"]))
        if source.tool == "get_transaction":
            return self.sandbox.get_transaction(str(keys["transaction_id"]))
        if source.tool == "get_approval":
            return self.sandbox.get_approval(str(keys["approval_id"]))
        return None
