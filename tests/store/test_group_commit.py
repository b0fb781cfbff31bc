"""Group commit: concurrent writes share a transaction, and every guarantee of a lone commit still holds.

The contract tests in test_store.py and the grant tests already run on a
group-commit store; these pin what only batching can break: races inside one
batch, one failing op in a batch, a failing COMMIT, a caller that gives up, and
a process killed while a batch commits (tests/store/test_processes.py).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from policyguard.enforcement.groupcommit import GroupCommitter
from policyguard.enforcement.store import EffectRequest, LedgerUnavailable, SQLiteStore

THREADS = 16


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "g.db"), synchronous="FULL", group_commit=True)
    s.set_captured("T1", 1000)
    yield s
    s.close()


def _race(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads released together; every result (or exception) by index."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def one(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a caller never got an answer"
    return results


def _effect(key: str, amount: float = 10, tx: str = "T1") -> EffectRequest:
    return EffectRequest(
        idempotency_key=key,
        tool="refund",
        transaction_id=tx,
        amount=amount,
        currency="USD",
        args_sha256="a" * 64,
        enforce_captured=True,
    )


def _hold(committer: GroupCommitter) -> tuple[threading.Event, threading.Thread]:
    """Make a leader that blocks inside its batch until the event is set, so later callers queue up behind it."""
    release, started = threading.Event(), threading.Event()

    def blocking(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)

    thread = threading.Thread(target=committer.run, args=(blocking,))
    thread.start()
    assert started.wait(10)
    return release, thread


def _queued(committer: GroupCommitter, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(committer._queue) < count and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(committer._queue) == count


def test_sixteen_threads_racing_one_idempotency_key_create_exactly_one_claim(store: SQLiteStore) -> None:
    claims = _race(
        THREADS,
        lambda i: store.begin_effect(
            "same", tool="refund", transaction_id="T1", amount=10, currency="USD", args_sha256="a" * 64
        ),
    )
    assert sum(claim.created for claim in claims) == 1
    assert {claim.record.idempotency_key for claim in claims} == {"same"}
    assert len(store.entries()) == 1


def test_sixteen_threads_racing_one_nonce_spend_it_exactly_once(store: SQLiteStore) -> None:
    spent = _race(THREADS, lambda i: store.spend_and_claim("n1", 1e12, f"c{i}", _effect(f"k{i}")))
    assert sorted(s.outcome for s in spent) == ["replayed"] * (THREADS - 1) + ["spent"]
    assert [e.idempotency_key for e in store.entries()] == [
        next(f"k{i}" for i, s in enumerate(spent) if s.outcome == "spent")
    ]


def test_concurrent_claims_within_the_captured_amount_never_overspend_it(store: SQLiteStore) -> None:
    spent = _race(THREADS, lambda i: store.spend_and_claim(f"n{i}", 1e12, f"c{i}", _effect(f"k{i}", amount=100)))
    created = [s for s in spent if s.claim is not None and s.claim.created]
    assert len(created) == 10  # 1000 captured / 100 each
    assert all(s.claim.refusal is not None for s in spent if s not in created)
    assert sum(e.amount for e in store.entries()) == 1000


def test_waiting_callers_share_one_transaction(store: SQLiteStore) -> None:
    committer = store._committer
    assert committer is not None
    release, leader = _hold(committer)
    before = committer.batches
    results: list[bool] = []
    callers = [threading.Thread(target=lambda i=i: results.append(store.consume(f"n{i}", 1e12))) for i in range(8)]
    for caller in callers:
        caller.start()
    _queued(committer, 8)
    release.set()
    for caller in callers + [leader]:
        caller.join(10)
    assert results == [True] * 8
    assert committer.batches - before == 2  # the held batch, then all eight waiting callers in one


def test_one_failing_operation_fails_only_its_own_caller(store: SQLiteStore) -> None:
    committer = store._committer
    assert committer is not None
    release, leader = _hold(committer)

    def writes_then_fails(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO nonces (nonce, expires_at) VALUES ('poison', 1)")
        raise ValueError("bad input in one call")

    outcomes: dict[str, Any] = {}

    def call(name: str, work: Callable[[], Any]) -> None:
        try:
            outcomes[name] = work()
        except Exception as exc:
            outcomes[name] = exc

    threads = [
        threading.Thread(target=call, args=("before", lambda: store.consume("n-before", 1e12))),
        threading.Thread(target=call, args=("poison", lambda: committer.run(writes_then_fails))),
        threading.Thread(target=call, args=("after", lambda: store.consume("n-after", 1e12))),
    ]
    for thread in threads:  # queued in this order behind the held leader
        thread.start()
        _queued(committer, threads.index(thread) + 1)
    release.set()
    for thread in threads + [leader]:
        thread.join(10)
    assert outcomes["before"] is True and outcomes["after"] is True
    assert isinstance(outcomes["poison"], ValueError)
    assert store.consume("n-before", 1e12) is False and store.consume("n-after", 1e12) is False
    assert store.consume("poison", 1e12) is True  # its write was rolled back


class _CommitFails:
    """A connection whose COMMIT fails (disk full, I/O error): nothing of the batch may be acknowledged."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.fail = True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.fail:
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def close(self) -> None:
        self._conn.close()


def test_a_failing_commit_fails_every_caller_of_the_batch_and_keeps_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    SQLiteStore(path).close()  # the schema
    wrapped: list[_CommitFails] = []

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        wrapped.append(_CommitFails(conn))
        return wrapped[-1]  # type: ignore[return-value]

    committer = GroupCommitter(connect, LedgerUnavailable)
    results = _race(
        4,
        lambda i: committer.run(
            lambda conn: conn.execute("INSERT INTO nonces (nonce, expires_at) VALUES (?, 1)", (f"n{i}",)).rowcount
        ),
    )
    assert all(isinstance(r, LedgerUnavailable) and "nothing of this batch" in str(r) for r in results)
    check = sqlite3.connect(path)
    assert check.execute("SELECT COUNT(*) FROM nonces").fetchone() == (0,)
    check.close()
    committer.close()


def test_a_caller_that_waits_too_long_withdraws_its_queued_write(store: SQLiteStore) -> None:
    committer = store._committer
    assert committer is not None
    release, leader = _hold(committer)
    committer.wait_s = 0.2
    with pytest.raises(LedgerUnavailable, match="withdrawn"):
        store.consume("late", 1e12)
    committer.wait_s = 30
    release.set()
    leader.join(10)
    assert store.consume("late", 1e12) is True  # the withdrawn write never ran


def test_a_closed_store_refuses_writes(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path / "x.db"), group_commit=True)
    assert s.consume("n1", 1e12)
    s.close()
    with pytest.raises(LedgerUnavailable, match="closed"):
        s.consume("n2", 1e12)


def test_group_commit_needs_a_file() -> None:
    with pytest.raises(ValueError, match="needs a database file"):
        SQLiteStore(":memory:", group_commit=True)


def test_a_deny_recorded_before_the_spend_wins_inside_a_batch(store: SQLiteStore) -> None:
    committer = store._committer
    assert committer is not None
    release, leader = _hold(committer)
    outcomes: list[Any] = []
    deny = threading.Thread(target=store.deny, args=("c1",))
    spend = threading.Thread(target=lambda: outcomes.append(store.spend_and_claim("n1", 1e12, "c1", _effect("k1"))))
    deny.start()
    _queued(committer, 1)
    spend.start()
    _queued(committer, 2)
    release.set()
    for thread in (deny, spend, leader):
        thread.join(10)
    assert [o.outcome for o in outcomes] == ["denied"]
    assert store.entries() == [] and store.consume("n1", 1e12) is False


@pytest.fixture
def deferred(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "d.db"), synchronous="FULL", group_commit=True, defer_completion=True)
    s.set_captured("T1", 1000)
    yield s
    s.close()


def _raw_status(store: SQLiteStore, key: str) -> str | None:
    """The status as another process would read it, bypassing the store's flush-before-read."""
    conn = sqlite3.connect(store.path)
    try:
        row = conn.execute("SELECT status FROM effects WHERE idempotency_key = ?", (key,)).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def test_deferred_completion_needs_group_commit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs group_commit"):
        SQLiteStore(str(tmp_path / "x.db"), defer_completion=True)


def test_a_deferred_completion_is_read_back_committed_by_this_store(deferred: SQLiteStore) -> None:
    deferred.spend_and_claim("n1", 1e12, "c1", _effect("k1"))
    committer = deferred._committer
    assert committer is not None
    committer.flush_after_s = 60  # no timer: only the read may flush it
    deferred.complete_effect("k1", '{"ok": true}')
    assert _raw_status(deferred, "k1") == "pending"
    record = deferred.lookup("k1")
    assert record is not None and record.status == "committed" and record.result_json == '{"ok": true}'
    assert _raw_status(deferred, "k1") == "committed"


def test_a_deferred_completion_is_committed_by_the_timer_when_nothing_else_happens(deferred: SQLiteStore) -> None:
    deferred.spend_and_claim("n1", 1e12, "c1", _effect("k1"))
    deferred.complete_effect("k1", "{}")
    deadline = time.monotonic() + 10
    while _raw_status(deferred, "k1") != "committed" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _raw_status(deferred, "k1") == "committed"


def test_a_deferred_completion_rides_in_the_next_claims_transaction(deferred: SQLiteStore) -> None:
    committer = deferred._committer
    assert committer is not None
    committer.flush_after_s = 60
    before = committer.batches
    for i in range(20):
        deferred.spend_and_claim(f"n{i}", 1e12, f"c{i}", _effect(f"k{i}", amount=1))
        deferred.complete_effect(f"k{i}", "{}")
    assert committer.batches - before == 20  # one commit (one fsync) per claim + completion pair
    assert [e.status for e in deferred.entries()] == ["committed"] * 20


def test_closing_commits_deferred_completions(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path / "c.db"), group_commit=True, defer_completion=True)
    s.set_captured("T1", 100)
    s.begin_effect("k1", tool="refund", transaction_id="T1", amount=1, currency=None, args_sha256="a" * 64)
    assert s._committer is not None
    s._committer.flush_after_s = 60
    s.complete_effect("k1", "{}")
    s.close()
    assert _raw_status(s, "k1") == "committed"


@pytest.mark.parametrize("defer", [False, True])
def test_sixteen_guarded_callers_on_group_commit_run_each_call_once(tmp_path: Path, defer: bool) -> None:
    """The executor end to end: distinct calls all run and are recorded; one key shared by all runs once."""
    from policyguard.checklist.schema import EffectSpec
    from policyguard.enforcement.executor import GuardedExecutor
    from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
    from policyguard.trajectory.messages import ToolCall

    private_pem, public_pem = generate_keypair()
    store = SQLiteStore(str(tmp_path / "e.db"), synchronous="FULL", group_commit=True, defer_completion=defer)
    store.set_captured("O1", 1e9)
    effects: list[str] = []
    executor = GuardedExecutor(
        {"refund": lambda order_id, amount, idempotency_key: effects.append(idempotency_key) or {"ok": True}},
        verifier=GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: "v1"),
        ledger=store,
        effects={"refund": EffectSpec(transaction_arg="order_id")},
    )
    issuer = GrantIssuer(private_pem)

    def run(call_id: str, key: str) -> str:
        call = ToolCall(id=call_id, name="refund", arguments={"order_id": "O1", "amount": 1, "idempotency_key": key})
        grant = issuer.issue(call, principal=None, resource=None, policy_version="v1")
        return executor.execute(call, grant, principal=None, resource=None).reason

    distinct = _race(THREADS, lambda i: [run(f"c{i}-{j}", f"k{i}-{j}") for j in range(10)])
    assert all(reasons == ["executed"] * 10 for reasons in distinct)
    shared = _race(THREADS, lambda i: run(f"s{i}", "shared"))
    assert shared.count("executed") == 1
    assert set(shared) <= {"executed", "replayed_from_ledger", "effect_pending: look up by key before retrying"}
    assert len(effects) == THREADS * 10 + 1 and len(set(effects)) == len(effects)
    entries = store.entries()
    assert len(entries) == THREADS * 10 + 1 and all(e.status == "committed" for e in entries)
    store.close()
