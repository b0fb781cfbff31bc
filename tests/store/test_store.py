"""The store contract, for every backend: nonces are spent once, claims are atomic, failures are loud.

The ``store`` fixture (tests/store/conftest.py) runs each contract test against
SQLite in memory, a SQLite file and PostgreSQL; the SQLite-only behaviours
(PRAGMAs, file locks) are at the end, PostgreSQL's own in test_pgstore.py.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from policyguard.enforcement.store import SCHEMA_VERSION, Ledger, LedgerUnavailable, NonceStore, SQLiteStore, Store


def _claim(store: Store, key: str, amount: float = 10, tx: str = "T1", **kw: object) -> object:
    return store.begin_effect(
        key, tool="refund", transaction_id=tx, amount=amount, currency="USD", args_sha256="a" * 64, **kw
    )


def test_the_store_implements_both_protocols(store: Store) -> None:
    assert isinstance(store, NonceStore) and isinstance(store, Ledger) and isinstance(store, Store)


def test_a_nonce_is_consumed_only_once(store: Store) -> None:
    assert store.consume("n1", 100.0) is True
    assert store.consume("n1", 100.0) is False
    assert store.consume("n2", 100.0) is True


def test_purging_forgets_only_expired_nonces(store: Store) -> None:
    store.consume("old", 10.0)
    store.consume("new", 30.0)
    assert store.purge_expired(20.0) == 1
    assert store.consume("new", 30.0) is False


def test_denials_are_recorded_per_call(store: Store) -> None:
    assert not store.is_denied("c1")
    store.deny("c1")
    store.deny("c1")
    assert store.is_denied("c1") and not store.is_denied("c2")


def test_a_key_is_claimed_once_then_the_record_comes_back(store: Store) -> None:
    first = store.begin_effect(
        "k1", tool="refund", transaction_id="T1", amount=10, currency="USD", args_sha256="a" * 64
    )
    assert first.created and first.record is not None and first.record.status == "pending"
    second = _claim(store, "k1", amount=99)
    assert not second.created and second.record == first.record  # type: ignore[attr-defined]


def test_completing_commits_and_only_committed_effects_count(store: Store) -> None:
    _claim(store, "k1", 10)
    _claim(store, "k2", 20)
    assert store.total("T1") == 0
    store.complete_effect("k1", '{"ok": true}')
    record = store.lookup("k1")
    assert record is not None and record.status == "committed" and record.result_json == '{"ok": true}'
    assert store.total("T1") == 10 and store.total("T1", tool="refund") == 10 and store.total("T1", tool="x") == 0
    assert [e.idempotency_key for e in store.entries()] == ["k1", "k2"]
    assert store.lookup("nope") is None


def test_completing_an_unknown_or_committed_key_fails_loudly(store: Store) -> None:
    with pytest.raises(LedgerUnavailable):
        store.complete_effect("nope", "{}")
    _claim(store, "k1")
    store.complete_effect("k1", "{}")
    with pytest.raises(LedgerUnavailable):
        store.complete_effect("k1", "{}")


def test_captured_amounts_cap_claims_including_pending_ones(store: Store) -> None:
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


def test_release_pending_drops_only_an_uncommitted_claim(store: Store) -> None:
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


def test_a_version_1_file_gains_the_session_tables_and_keeps_its_rows(tmp_path: Path) -> None:
    """A file written before sessions existed opens as the current version, its nonces still spent."""
    from policyguard.session import NewEvent

    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE nonces (nonce TEXT PRIMARY KEY, expires_at REAL NOT NULL)")
        conn.execute("INSERT INTO nonces VALUES ('old-nonce', 1e12)")
        conn.execute("PRAGMA user_version = 1")
    store = SQLiteStore(str(path))
    assert store.consume("old-nonce", 1e12) is False
    assert [e.seq for e in store.append_events("s1", [NewEvent(kind="user", content="hi")])] == [1]
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2


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


def test_sixteen_threads_one_nonce_one_winner(store: Store) -> None:
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


def test_sixteen_threads_one_key_one_claim(store: Store) -> None:
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


def test_a_released_claim_frees_its_amount_under_the_captured_cap(store: Store) -> None:
    store.set_captured("T1", 30)
    assert _claim(store, "k1", 20, enforce_captured=True).created  # type: ignore[attr-defined]
    assert _claim(store, "k2", 30, enforce_captured=True).refusal is not None  # type: ignore[attr-defined]
    assert store.release_pending("k1")
    assert _claim(store, "k2", 30, enforce_captured=True).created  # type: ignore[attr-defined]


def test_sixteen_threads_never_claim_past_the_captured_amount(store: Store) -> None:
    """Concurrent refunds against one transaction: the ceiling holds, the claimed sum stays exact."""
    store.set_captured("T1", 100)
    barrier = threading.Barrier(16)
    created: list[bool] = []

    def run(i: int) -> None:
        barrier.wait()
        created.append(_claim(store, f"k{i}", amount=10, enforce_captured=True).created)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert created.count(True) == 10 and len(store.entries()) == 10
    assert _claim(store, "one-more", amount=0.5, enforce_captured=True).refusal is not None  # type: ignore[attr-defined]


def test_a_claim_without_the_ceiling_still_counts_against_it(store: Store) -> None:
    store.set_captured("T1", 30)
    assert _claim(store, "free", 25).created  # type: ignore[attr-defined]
    assert _claim(store, "capped", 10, enforce_captured=True).refusal is not None  # type: ignore[attr-defined]
    assert _claim(store, "capped", 5, enforce_captured=True).created  # type: ignore[attr-defined]


def test_an_existing_key_comes_back_even_where_the_ceiling_would_refuse(store: Store) -> None:
    store.set_captured("T1", 10)
    first = _claim(store, "k1", 10, enforce_captured=True)
    again = _claim(store, "k1", 10, enforce_captured=True)
    assert not again.created and again.refusal is None and again.record == first.record  # type: ignore[attr-defined]


def test_records_keep_their_fields_and_amounts_exactly(store: Store) -> None:
    claim = store.begin_effect(
        "k\u00e9'; DROP TABLE effects; --",
        tool="refund",
        transaction_id="T'1",
        amount=0.1 + 0.2,
        currency=None,
        args_sha256="b" * 64,
    )
    stored = store.lookup("k\u00e9'; DROP TABLE effects; --")
    assert stored == claim.record and stored is not None and stored.amount == 0.1 + 0.2 and stored.currency is None
    store.complete_effect(stored.idempotency_key, '{"x": "\u00fc"}')
    assert store.total("T'1") == 0.1 + 0.2


def test_a_key_that_is_not_text_is_refused_as_unavailable_on_every_backend(store: Store) -> None:
    """A lone surrogate in an agent-chosen key cannot be stored: LedgerUnavailable (inconclusive), never a raw
    UnicodeEncodeError, nothing written, and the store keeps working."""
    key = "refund:\ud800"
    attempts = (
        lambda: store.consume(key, 1.0),
        lambda: _claim(store, key),
        lambda: store.deny(key),
        lambda: store.is_denied(key),
        lambda: store.lookup(key),
    )
    for attempt in attempts:
        with pytest.raises(LedgerUnavailable):
            attempt()
    assert store.entries() == [] and store.consume("fine", 1.0)


def test_a_deny_under_any_of_several_keys_is_found_in_one_lookup(store: Store) -> None:
    """A check looks up three keys per allow (the bare id and two identities): the store answers them at once."""
    from policyguard.enforcement.scoped import any_denied

    store.deny("k2")
    assert store.any_denied(["k1", "k2", "k3"])  # type: ignore[attr-defined]
    assert not store.any_denied(["k1", "k3"]) and not store.any_denied([])  # type: ignore[attr-defined]

    class OneByOne:  # a store of one's own with is_denied only
        def is_denied(self, call_id: str) -> bool:
            return store.is_denied(call_id)

    assert any_denied(OneByOne(), ["k1", "k2"]) and not any_denied(OneByOne(), ["k1"])
