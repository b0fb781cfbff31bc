"""Child-process jobs for the multi-process and crash tests (run with runpy in a spawned process).

``JOB`` is injected as a global: ``kind``, the store URL (``url``, SQLite file or
PostgreSQL schema, opened with ``open_store``) and paths. Every tool invocation
appends one line to ``JOB["effects"]`` with an O_APPEND write, so the parent can
count real side effects independently of the ledger.
"""

from __future__ import annotations

import os
import time
from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantVerifier
from policyguard.enforcement.store import SQLiteStore, Store
from policyguard.enforcement.storeurl import open_store
from policyguard.trajectory.messages import ToolCall

JOB: dict[str, Any] = globals().get("JOB", {})

CHECKLIST = Checklist.model_validate(
    {
        "policy": {"name": "refunds", "version": "sha256:" + "1" * 64},
        "tools": {"issue_refund": {"effect": {"transaction_arg": "order_id"}}},
    }
)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def refund(order_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
    _append(JOB["effects"], f"{os.getpid()} {idempotency_key}")
    return {"status": "issued", "amount": amount}


def _store() -> Store:
    return open_store(JOB["url"], synchronous=JOB.get("synchronous", "NORMAL"))


def execute() -> None:
    """Wait at the barrier, then try the call with the grant; record the outcome."""
    store = _store()
    verifier = GrantVerifier(JOB["public_pem"], nonces=store, current_policy_version=lambda: "v1")
    executor = GuardedExecutor({"issue_refund": refund}, verifier=verifier, ledger=store, checklist=CHECKLIST)
    call = ToolCall.model_validate(JOB["call"])
    JOB["barrier"].wait()
    result = executor.execute(call, JOB["grant"], principal="alice", resource="O1")
    _append(JOB["outcomes"], f"{int(result.executed)} {result.reason}")


def crash_after_tool() -> None:
    """Claim, run the tool, then die before recording completion."""
    store = _store()
    store.begin_effect(
        JOB["key"], tool="issue_refund", transaction_id="O1", amount=50, currency=None, args_sha256=JOB["sha"]
    )
    refund("O1", 50, JOB["key"])
    os._exit(1)


def commit_forever() -> None:
    """Claim, run, complete, over and over, until the parent kills us."""
    store = _store()
    i = 0
    while True:
        key = f"k{i:06d}"
        store.begin_effect(key, tool="issue_refund", transaction_id="O1", amount=1, currency=None, args_sha256="x")
        refund("O1", 1, key)
        store.complete_effect(key, '{"status": "issued"}')
        i += 1


def hang_inside_claim() -> None:
    """Make an enforced claim and stop inside its transaction, holding its locks, until killed.

    SQLite: the store reads its clock inside the BEGIN IMMEDIATE claim
    transaction; this clock announces that and sleeps. PostgreSQL: the store's
    claim function runs in a transaction that is then left open - the effect row
    and the claimed sum are written but not committed, the ceiling lock is held.
    """
    url: str = JOB["url"]
    if url.startswith("sqlite:///"):

        def clock() -> float:
            _append(JOB["effects"], "inside")
            time.sleep(120)
            return 0.0

        SQLiteStore(url[len("sqlite:///") :], clock=clock).begin_effect(
            "stuck",
            tool="issue_refund",
            transaction_id="O1",
            amount=5,
            currency=None,
            args_sha256="x",
            enforce_captured=True,
        )
        return
    import psycopg

    from policyguard.enforcement.pgstore import PostgresStore

    PostgresStore(url).close()  # the schema and its claim function exist
    conn = psycopg.connect(url)  # not autocommit: the claim below stays uncommitted
    outcome = conn.execute(
        "SELECT o_outcome FROM policyguard_claim('stuck', 'issue_refund', 'O1', 5, NULL, 'x', true, 0)"
    ).fetchone()
    _append(JOB["effects"], "inside" if outcome == ("created",) else f"unexpected {outcome}")
    time.sleep(120)


def crash_before_deferred_completion() -> None:
    """Claim, run the tool, complete with a deferred write, and die before any batch carried it."""
    store = SQLiteStore(JOB["db"], synchronous="FULL", group_commit=True, defer_completion=True)
    assert store._committer is not None
    store._committer.flush_after_s = 3600
    store.begin_effect(
        JOB["key"], tool="issue_refund", transaction_id="O1", amount=50, currency=None, args_sha256=JOB["sha"]
    )
    refund("O1", 50, JOB["key"])
    store.complete_effect(JOB["key"], '{"status": "issued"}')
    os._exit(1)


def group_claims_forever() -> None:
    """Eight threads claim keys through one group-commit store; each acknowledged claim is logged, until killed."""
    import threading

    store = SQLiteStore(JOB["db"], synchronous="FULL", group_commit=True)

    def claim(thread: int) -> None:
        i = 0
        while True:
            key = f"t{thread}-{i:06d}"
            claim = store.begin_effect(
                key, tool="issue_refund", transaction_id="O1", amount=1, currency=None, args_sha256="x"
            )
            if claim.created:
                _append(JOB["acked"], key)
            i += 1

    for thread in range(8):
        threading.Thread(target=claim, args=(thread,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    kinds = {
        "execute": execute,
        "crash_after_tool": crash_after_tool,
        "commit_forever": commit_forever,
        "hang_inside_claim": hang_inside_claim,
        "group_claims_forever": group_claims_forever,
        "crash_before_deferred_completion": crash_before_deferred_completion,
    }
    kinds[JOB["kind"]]()
