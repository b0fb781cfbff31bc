"""The SQLite store: nonces are spent once, claims are atomic, failures are loud."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from policyguard.store import SCHEMA_VERSION, Ledger, LedgerUnavailable, NonceStore, SQLiteStore


@pytest.fixture(params=["memory", "file", "group-commit"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SQLiteStore:
    path = ":memory:" if request.param == "memory" else str(tmp_path / "s.db")
    s = SQLiteStore(path, group_commit=request.param == "group-commit")
    request.addfinalizer(s.close)
    return s


def _claim(store: SQLiteStore, key: str, amount: float = 10, tx: str = "T1", **kw: object) -> object:
    return store.begin_effect(
        key, tool="refund", transaction_id=tx, amount=amount, currency="USD", args_sha256="a" * 64, **kw
    )


def test_the_store_implements_both_protocols(store: SQLiteStore) -> None:
    assert isinstance(store, NonceStore) and isinstance(store, Ledger)


def test_a_nonce_is_consumed_only_once(store: SQLiteStore) -> None:
    assert store.consume("n1", 100.0) is True
    assert store.consume("n1", 100.0) is False
    assert store.consume("n2", 100.0) is True


def test_purging_forgets_only_expired_nonces(store: SQLiteStore) -> None:
    store.consume("old", 10.0)
    store.consume("new", 30.0)
    assert store.purge_expired(20.0) == 1
    assert store.consume("new", 30.0) is False


def test_denials_are_recorded_per_call(store: SQLiteStore) -> None:
    assert not store.is_denied("c1")
    store.deny("c1")
    store.deny("c1")
    assert store.is_denied("c1") and not store.is_denied("c2")


def test_a_key_is_claimed_once_then_the_record_comes_back(store: SQLiteStore) -> None:
    first = store.begin_effect(
        "k1", tool="refund", transaction_id="T1", amount=10, currency="USD", args_sha256="a" * 64
    )
    assert first.created and first.record is not None and first.record.status == "pending"
    second = _claim(store, "k1", amount=99)
    assert not second.created and second.record == first.record  # type: ignore[attr-defined]


def test_completing_commits_and_only_committed_effects_count(store: SQLiteStore) -> None:
    _claim(store, "k1", 10)
    _claim(store, "k2", 20)
    assert store.total("T1") == 0
    store.complete_effect("k1", '{"ok": true}')
    record = store.lookup("k1")
    assert record is not None and record.status == "committed" and record.result_json == '{"ok": true}'
    assert store.total("T1") == 10 and store.total("T1", tool="refund") == 10 and store.total("T1", tool="x") == 0
    assert [e.idempotency_key for e in store.entries()] == ["k1", "k2"]
    assert store.lookup("nope") is None


def test_completing_an_unknown_or_committed_key_fails_loudly(store: SQLiteStore) -> None:
    with pytest.raises(LedgerUnavailable):
        store.complete_effect("nope", "{}")
    _claim(store, "k1")
    store.complete_effect("k1", "{}")
    with pytest.raises(LedgerUnavailable):
        store.complete_effect("k1", "{}")


def test_captured_amounts_cap_claims_including_pending_ones(store: SQLiteStore) -> None:
    assert store.captured("T1") is None
    refused = _claim(store, "k0", enforce_captured=True)
    assert refused.refusal == "captured amount unknown" and store.lookup("k0") is None  # type: ignore[attr-defined]
    store.set_captured("T1", 25)
    store.set_captured("T1", 30)
    assert store.captured("T1") == 30
    assert _claim(store, "k1", 20, enforce_captured=True).created  # type: ignore[attr-defined]
    over = _claim(store, "k2", 11, enforce_captured=True)
    assert not over.created and over.refusal is not None  # type: ignore[attr-defined]
    assert _claim(store, "k3", 10, enforce_captured=True).created  # type: ignore[attr-defined]


def test_release_pending_drops_only_an_uncommitted_claim(store: SQLiteStore) -> None:
    _claim(store, "k1")
    _claim(store, "k2")
    store.complete_effect("k2", "{}")
    assert store.release_pending("k1") and not store.release_pending("k2")
    assert [e.idempotency_key for e in store.entries()] == ["k2"]


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerUnavailable, match="schema version"):
        SQLiteStore(str(path))


def test_an_unopenable_store_raises_ledger_unavailable(tmp_path: Path) -> None:
    with pytest.raises(LedgerUnavailable):
        SQLiteStore(str(tmp_path / "missing-dir" / "s.db"))


def test_a_locked_database_is_unavailable_not_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = SQLiteStore(path, busy_timeout_ms=50)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LedgerUnavailable):
            _claim(store, "k1")
        with pytest.raises(LedgerUnavailable):
            store.consume("n1", 1.0)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert _claim(store, "k1").created  # type: ignore[attr-defined]
    store.close()


def test_wal_mode_and_synchronous_setting_apply_to_files(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"), synchronous="NORMAL")
    with store._conn() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(ValueError):
        SQLiteStore(":memory:", synchronous="OFF")  # type: ignore[arg-type]


def test_sixteen_threads_one_nonce_one_winner(store: SQLiteStore) -> None:
    barrier = threading.Barrier(16)
    wins: list[bool] = []

    def run() -> None:
        barrier.wait()
        wins.append(store.consume("same", 100.0))

    threads = [threading.Thread(target=run) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 15 + [True]


def test_sixteen_threads_one_key_one_claim(store: SQLiteStore) -> None:
    barrier = threading.Barrier(16)
    created: list[bool] = []

    def run(i: int) -> None:
        barrier.wait()
        created.append(_claim(store, "same", amount=i + 1).created)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert created.count(True) == 1 and len(store.entries()) == 1


def test_a_released_claim_frees_its_amount_under_the_captured_cap(store: SQLiteStore) -> None:
    store.set_captured("T1", 30)
    assert _claim(store, "k1", 20, enforce_captured=True).created  # type: ignore[attr-defined]
    assert _claim(store, "k2", 30, enforce_captured=True).refusal is not None  # type: ignore[attr-defined]
    assert store.release_pending("k1")
    assert _claim(store, "k2", 30, enforce_captured=True).created  # type: ignore[attr-defined]
