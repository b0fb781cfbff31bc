"""The approval queue on PostgreSQL: what replicas sharing one database rely on.

The contract tests in test_queue.py run on this binding too (the reviewers'
race included); these are the parts only a shared server shows: a deny
that the other replica's executor honours, the first start of several
replicas, and the whole escalate -> approve -> retry-once flow on PostgreSQL.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from policyguard.approvals.flow import QueueApprovals  # noqa: E402
from policyguard.approvals.pgqueue import PostgresApprovalQueue  # noqa: E402
from policyguard.approvals.queue import ApprovalError, ApprovalRequest  # noqa: E402
from policyguard.approvals.url import open_approvals  # noqa: E402
from policyguard.enforcement.executor import GuardedExecutor  # noqa: E402
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair  # noqa: E402
from policyguard.enforcement.pgstore import PostgresStore  # noqa: E402
from policyguard.gate.hardgate import HardGate  # noqa: E402
from policyguard.guard.core import Guard  # noqa: E402
from policyguard.trajectory.messages import Message, ToolCall, Trajectory  # noqa: E402

from .test_queue import request  # noqa: E402


def _queue(url: str) -> PostgresApprovalQueue:
    return PostgresApprovalQueue(PostgresStore(url))


def test_open_approvals_takes_a_postgresql_url(pg_url: str) -> None:
    first = open_approvals(pg_url)
    sent = first.submit(request(created_at=1.0, expires_at=4e9))
    first.close()
    again = open_approvals(pg_url)
    try:
        assert isinstance(again, PostgresApprovalQueue)
        assert again.get(sent.id) == sent
    finally:
        again.close()


def test_a_deny_on_one_replica_is_a_denial_in_the_shared_store(pg_url: str) -> None:
    reviewer_side, executor_side = _queue(pg_url), PostgresStore(pg_url)
    try:
        sent = reviewer_side.submit(request(call_id="call-77", expires_at=4e9))
        reviewer_side.deny(sent.id, "alice", "no")
        assert executor_side.is_denied("call-77")
    finally:
        reviewer_side.close()
        executor_side.close()


def test_replicas_starting_together_create_the_tables_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    queues: list[PostgresApprovalQueue] = []
    lock = threading.Lock()

    def start() -> None:
        try:
            made = _queue(pg_url)
            with lock:
                queues.append(made)
        except BaseException as exc:  # noqa: BLE001 - the test reports every failure
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(queues) == 6
    for made in queues:
        made.close()


def test_a_newer_queue_schema_is_refused(pg_url: str) -> None:
    queue = _queue(pg_url)
    with queue.store.transaction() as conn:
        conn.execute("UPDATE approvals_schema SET version = 99")
    queue.close()
    with pytest.raises(ApprovalError, match="newer"):
        _queue(pg_url)


POLICY = "A refund above 500 needs a supervisor's approval.\n"


def test_escalate_approve_and_retry_once_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    from policyguard.checklist.schema import Checklist
    from policyguard.trajectory.canonical import policy_version

    checklist = Checklist.model_validate(
        {
            "policy": {"name": "refunds", "version": policy_version(POLICY)},
            "tools": {"issue_refund": {"effect": {"transaction_arg": "order_id", "ceiling": 5000,
                                                  "approval_threshold": 500}}},
        }
    )  # fmt: skip
    store = PostgresStore(pg_url)
    queue = PostgresApprovalQueue(store)
    private_pem, public_pem = generate_keypair()
    guard = Guard(checklist, POLICY, gate=HardGate(checklist), principal="agent-1", grants=GrantIssuer(private_pem),
                  denials=store, approvals=queue)  # fmt: skip
    ran: list[dict[str, object]] = []
    executor = GuardedExecutor(
        {"issue_refund": lambda **arguments: ran.append(arguments) or {"status": "issued"}},
        verifier=GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: checklist.policy.version),
        ledger=store, checklist=checklist, approvals=QueueApprovals(queue, checklist),
    )  # fmt: skip
    store.set_captured("O1", 5000)
    arguments = {"order_id": "O1", "amount": 800, "idempotency_key": "refund:O1"}

    def attempt(call_id: str) -> bool:
        call = ToolCall(id=call_id, name="issue_refund", arguments=arguments)
        dialogue = Trajectory(messages=[Message(role="user", content="Refund O1."),
                                        Message(role="assistant", tool_calls=[call])])  # fmt: skip
        decision = guard.check(call, dialogue)
        if decision.awaiting_approval:
            return False
        if decision.allowed:
            return executor.execute(call, decision.grant, principal="agent-1", resource=None).executed
        return False

    try:
        assert attempt("c1") is False
        waiting: list[ApprovalRequest] = queue.pending()
        assert len(waiting) == 1
        other_replica = open_approvals(pg_url)
        other_replica.approve(waiting[0].id, "dana", "verified")
        other_replica.close()
        assert attempt("c2") is True
        assert attempt("c3") is False
        assert ran == [arguments]
        final = queue.get(waiting[0].id)
        assert final is not None and (final.status, final.used_call_id) == ("used", "c2")
    finally:
        queue.close()
