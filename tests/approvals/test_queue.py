"""The approval queue: requests wait oldest first, each decision is one atomic step that happens once."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from policyguard.approvals.queue import (
    ApprovalError,
    ApprovalQueue,
    ApprovalRequest,
    DialogueLine,
    RequirementView,
    SQLApprovalQueue,
    SQLiteApprovalQueue,
)
from policyguard.approvals.url import open_approvals
from policyguard.enforcement.store import SQLiteStore
from policyguard.errors import ConfigError


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "file", "postgres"])
def clock_queue(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Clock, SQLiteApprovalQueue]:
    """The same contract on every binding: SQLite in memory, a SQLite file, PostgreSQL (a fresh schema)."""
    clock = Clock()
    queue: SQLApprovalQueue
    if request.param == "postgres":
        from policyguard.approvals.pgqueue import PostgresApprovalQueue
        from policyguard.enforcement.pgstore import PostgresStore

        queue = PostgresApprovalQueue(PostgresStore(request.getfixturevalue("pg_url")), clock=clock)
    else:
        path = ":memory:" if request.param == "memory" else str(tmp_path / "q.db")
        queue = SQLiteApprovalQueue(SQLiteStore(path), clock=clock)
    request.addfinalizer(queue.close)
    return clock, queue  # type: ignore[return-value]


@pytest.fixture
def queue(clock_queue: tuple[Clock, SQLiteApprovalQueue]) -> SQLiteApprovalQueue:
    return clock_queue[1]


def request(created_at: float = 1000.0, expires_at: float = 2000.0, **fields: object) -> ApprovalRequest:
    values: dict[str, object] = {
        "call_id": "c1",
        "tool": "issue_refund",
        "arguments": {"transaction_id": "T-3", "amount": 800},
        "args_sha256": "a" * 64,
        "principal": "agent-1",
        "policy_version": "sha256:" + "b" * 64,
        "requirements": [
            RequirementView(
                id="refund.large_needs_approval",
                status="NOT_MET",
                evidence="check is false",
                judged_by="gate",
                source="A refund above 500 needs a human approval",
                approvable=True,
            ),
            RequirementView(id="refund.policy_allows", status="MET", judged_by="gate"),
        ],
        "remediation": "waiting for a supervisor",
        "dialogue": [DialogueLine(role="user", content="refund 800 please")],
        "created_at": created_at,
        "expires_at": expires_at,
    }
    values.update(fields)
    return ApprovalRequest.model_validate(values)


def test_the_sqlite_queue_implements_the_protocol(queue: SQLiteApprovalQueue) -> None:
    assert isinstance(queue, ApprovalQueue)


def test_a_submitted_request_reads_back_whole(queue: SQLiteApprovalQueue) -> None:
    sent = queue.submit(request())
    got = queue.get(sent.id)
    assert got == sent
    assert got is not None and got.failed[0].source == "A refund above 500 needs a human approval"


def test_request_ids_are_unguessable_and_unique() -> None:
    ids = {request().id for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("apr-") and len(i) == 28 for i in ids)


def test_pending_lists_oldest_first(queue: SQLiteApprovalQueue) -> None:
    late = queue.submit(request(created_at=1010.0))
    early = queue.submit(request(created_at=1001.0))
    assert [r.id for r in queue.pending()] == [early.id, late.id]
    assert [r.id for r in queue.pending(limit=1)] == [early.id]


def test_approve_records_who_why_and_when(clock_queue: tuple[Clock, SQLiteApprovalQueue]) -> None:
    clock, queue = clock_queue
    sent = queue.submit(request())
    clock.now = 1100.0
    done = queue.approve(sent.id, "alice", "customer is a known VIP")
    assert (done.status, done.reviewer, done.reason, done.decided_at) == (
        "approved",
        "alice",
        "customer is a known VIP",
        1100.0,
    )
    assert queue.pending() == []


def test_deny_is_final(queue: SQLiteApprovalQueue) -> None:
    sent = queue.submit(request())
    queue.deny(sent.id, "bob", "no")
    with pytest.raises(ApprovalError) as caught:
        queue.approve(sent.id, "alice")
    assert caught.value.reason == "not_pending"
    with pytest.raises(ApprovalError):
        queue.use(sent.id, "c2", "d" * 64)
    assert queue.get(sent.id).status == "denied"  # type: ignore[union-attr]


def test_a_request_is_approved_only_once(queue: SQLiteApprovalQueue) -> None:
    sent = queue.submit(request())
    queue.approve(sent.id, "alice")
    with pytest.raises(ApprovalError, match="approved, not pending"):
        queue.approve(sent.id, "mallory")
    assert queue.get(sent.id).reviewer == "alice"  # type: ignore[union-attr]


def test_an_approval_is_used_only_once(queue: SQLiteApprovalQueue) -> None:
    sent = queue.submit(request())
    with pytest.raises(ApprovalError, match="pending, not approved"):
        queue.use(sent.id, "c2", "d" * 64)
    queue.approve(sent.id, "alice")
    used = queue.use(sent.id, "c2", "d" * 64)
    assert (used.status, used.used_call_id, used.grant_sha256) == ("used", "c2", "d" * 64)
    with pytest.raises(ApprovalError):
        queue.use(sent.id, "c3", "e" * 64)


def test_requests_and_approvals_expire(clock_queue: tuple[Clock, SQLiteApprovalQueue]) -> None:
    clock, queue = clock_queue
    waiting = queue.submit(request(expires_at=1500.0))
    approved = queue.submit(request(expires_at=1500.0))
    queue.approve(approved.id, "alice")
    clock.now = 1500.0
    assert queue.pending() == []
    assert queue.get(waiting.id).status == "expired"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError) as caught:
        queue.approve(waiting.id, "alice")
    assert caught.value.reason == "expired"
    with pytest.raises(ApprovalError) as caught:
        queue.use(approved.id, "c2", "d" * 64)
    assert caught.value.reason == "expired"


def test_unknown_ids_and_blank_reviewers_are_refused(queue: SQLiteApprovalQueue) -> None:
    assert queue.get("apr-nope") is None
    with pytest.raises(ApprovalError) as caught:
        queue.approve("apr-nope", "alice")
    assert caught.value.reason == "not_found"
    sent = queue.submit(request())
    with pytest.raises(ApprovalError, match="reviewer"):
        queue.approve(sent.id, "  ")
    assert queue.get(sent.id).status == "pending"  # type: ignore[union-attr]


def test_a_request_id_cannot_be_submitted_twice(queue: SQLiteApprovalQueue) -> None:
    sent = queue.submit(request())
    queue.approve(sent.id, "alice")
    with pytest.raises(ApprovalError, match="already exists"):
        queue.submit(request(id=sent.id))
    assert queue.get(sent.id).status == "approved"  # type: ignore[union-attr]


def test_only_pending_requests_can_be_submitted(queue: SQLiteApprovalQueue) -> None:
    with pytest.raises(ApprovalError):
        queue.submit(request(status="approved", reviewer="mallory"))
    assert queue.all() == []


def test_filters_combine(queue: SQLiteApprovalQueue) -> None:
    a = queue.submit(request(tool="issue_refund", principal="p1"))
    queue.submit(request(tool="issue_refund", principal="p2"))
    queue.submit(request(tool="cancel", principal="p1"))
    assert [r.id for r in queue.all(tool="issue_refund", principal="p1")] == [a.id]
    queue.deny(a.id, "bob")
    assert [r.id for r in queue.all(status="denied")] == [a.id]
    assert len(queue.all(status="pending")) == 2


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="extra"):
        ApprovalRequest.model_validate({**request().model_dump(), "approved_by_ceo": True})


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_approve_and_deny_exactly_one_wins(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four reviewers (each its own store connection, as replicas would have) race on 20 requests."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path / 'race.db'}"
    setup = open_approvals(url)
    ids = [setup.submit(request_for_race()).id for _ in range(20)]
    setup.close()
    outcomes: dict[str, list[str]] = {i: [] for i in ids}
    lock = threading.Lock()

    def decide(kind: str) -> None:
        queue = open_approvals(url)
        try:
            for request_id in ids:
                try:
                    (queue.approve if kind == "approve" else queue.deny)(request_id, kind)
                except ApprovalError:
                    continue
                with lock:
                    outcomes[request_id].append(kind)
        finally:
            queue.close()

    threads = [threading.Thread(target=decide, args=(k,)) for k in ("approve", "deny", "approve", "deny")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    check = open_approvals(url)
    try:
        for request_id, won in outcomes.items():
            assert len(won) == 1, (request_id, won)
            final = check.get(request_id)
            assert final is not None and final.reviewer == won[0]
            assert final.status == ("approved" if won[0] == "approve" else "denied")
    finally:
        check.close()


def request_for_race() -> ApprovalRequest:
    return request(expires_at=4e9)


def test_a_newer_queue_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteApprovalQueue(SQLiteStore(str(path))).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE approvals_schema SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(ApprovalError, match="newer"):
        SQLiteApprovalQueue(SQLiteStore(str(path)))


def test_open_approvals_takes_a_store_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    first = open_approvals(url)
    sent = first.submit(request(created_at=1.0, expires_at=4e9))
    first.close()
    again = open_approvals(url)
    try:
        assert again.get(sent.id) == sent
    finally:
        again.close()
    with pytest.raises(ConfigError, match="unknown scheme"):
        open_approvals("redis://x")


def test_a_tampered_record_is_an_error_naming_it_never_half_a_request(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    queue = SQLiteApprovalQueue(SQLiteStore(str(path)))
    sent = queue.submit(request(expires_at=4e9))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE approval_requests SET body = ?", ('{"arguments": 1}',))
    conn.commit()
    conn.close()
    try:
        with pytest.raises(ApprovalError, match=f"{sent.id}.*unreadable record"):
            queue.get(sent.id)
        with pytest.raises(ApprovalError) as caught:
            queue.all()
        assert caught.value.reason == "corrupt"
    finally:
        queue.close()


@pytest.mark.parametrize("weird", ["' OR 1=1 --", "apr-%", "", "apr-\x00", "ａｐｒ"])
def test_odd_ids_match_nothing(queue: SQLiteApprovalQueue, weird: str) -> None:
    queue.submit(request())
    assert queue.get(weird) is None
    with pytest.raises(ApprovalError):
        queue.approve(weird, "alice")
    assert len(queue.pending()) == 1
