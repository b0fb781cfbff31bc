"""What only PostgresStore has: schema migrations, a server that fails, URLs, text limits.

The shared contract (nonces, claims, the ceiling, races) is in test_store.py and
test_processes.py, run against every backend.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.enforcement.store import LedgerUnavailable, SQLiteStore, Store
from policyguard.enforcement.storeurl import open_store
from policyguard.errors import ConfigError

psycopg = pytest.importorskip("psycopg", reason="the extra [postgres] is not installed")

from policyguard.enforcement.pgstore import SCHEMA_VERSION, PostgresStore, drop_schema, redact  # noqa: E402

ALL_VERSIONS = [(version,) for version in range(1, SCHEMA_VERSION + 1)]  # one row per migration applied


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url, timeout_s=2.0)
    yield store
    store.close()


def _sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def _claim(store: Store, key: str, **kw: Any) -> Any:
    return store.begin_effect(key, tool="refund", transaction_id="T1", amount=1, currency=None, args_sha256="a", **kw)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on exit: nothing listens there


# -- schema ------------------------------------------------------------------


def test_the_schema_is_created_once_and_versioned(pg_url: str, pg: PostgresStore) -> None:
    PostgresStore(pg_url).close()  # opening again migrates nothing
    assert _sql(pg_url, "SELECT version FROM schema_version ORDER BY version") == ALL_VERSIONS
    tables = {r[0] for r in _sql(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    assert tables == {"schema_version", "nonces", "denials", "effects", "captures", "claimed"} | {
        "sessions",
        "session_events",
        "session_tombstones",
    }


def test_a_version_1_database_gains_the_session_tables_and_keeps_its_rows(pg_url: str) -> None:
    """A store made before sessions existed: opening it migrates to the current version, nothing is lost."""
    from policyguard.enforcement.pgstore import _MIGRATIONS
    from policyguard.session import NewEvent

    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for statement in dict(_MIGRATIONS)[1]:
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        conn.execute("INSERT INTO nonces (nonce, expires_at) VALUES ('old-nonce', 1e12)")
    store = PostgresStore(pg_url)
    try:
        assert store.consume("old-nonce", 1e12) is False
        assert [e.seq for e in store.append_events("s1", [NewEvent(kind="user", content="hi")])] == [1]
    finally:
        store.close()
    assert _sql(pg_url, "SELECT version FROM schema_version ORDER BY version") == ALL_VERSIONS


def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    """Eight stores opened at the same moment on an empty schema: no error, one version row."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            PostgresStore(pg_url, max_size=1).close()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and _sql(pg_url, "SELECT version FROM schema_version ORDER BY version") == ALL_VERSIONS


def test_a_database_from_a_newer_policyguard_is_refused(pg_url: str, pg: PostgresStore) -> None:
    _sql(pg_url, "INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(LedgerUnavailable, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        PostgresStore(pg_url)


def test_a_named_schema_keeps_a_deployment_apart_and_can_be_dropped(pg_url: str, pg: PostgresStore) -> None:
    other = PostgresStore(pg_url, schema="tenant_b")
    try:
        assert pg.consume("n1", 1e12) and other.consume("n1", 1e12)  # two deployments, two nonce tables
        assert other.consume("n1", 1e12) is False
    finally:
        other.close()
    drop_schema(pg_url, "tenant_b")
    assert _sql(pg_url, "SELECT 1 FROM pg_namespace WHERE nspname = 'tenant_b'") == []


@pytest.mark.parametrize("schema", ["Tenant", "a-b", 'x"; DROP TABLE nonces; --', "", "a" * 64])
def test_a_schema_name_that_needs_quoting_is_refused(pg_url: str, schema: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresStore(pg_url, schema=schema)
    with pytest.raises(ValueError, match="schema"):
        drop_schema(pg_url, schema)


# -- a server that fails -------------------------------------------------------


def test_an_unreachable_server_is_unavailable_and_the_password_is_not_shown() -> None:
    url = f"postgresql://alice:s3cret@127.0.0.1:{_dead_port()}/db"
    with pytest.raises(LedgerUnavailable) as caught:
        PostgresStore(url, connect_timeout_s=1)
    assert "s3cret" not in str(caught.value) and "alice:***@" in str(caught.value)


def test_a_lock_held_elsewhere_times_out_as_unavailable_not_as_no_effect(pg_url: str, pg: PostgresStore) -> None:
    pg.set_captured("T1", 10)
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("SELECT 1 FROM captures WHERE transaction_id = 'T1' FOR UPDATE")
        with pytest.raises(LedgerUnavailable, match="timeout"):
            _claim(pg, "k1", enforce_captured=True)
        blocker.rollback()
    assert _claim(pg, "k1", enforce_captured=True).created
    assert pg.entries()[0].idempotency_key == "k1"


def test_connections_killed_by_the_server_fail_closed_then_recover(pg_url: str) -> None:
    name = f"pg-victim-{id(pg_url)}"
    pg = PostgresStore(f"{pg_url}&application_name={name}", min_size=2, max_size=2)
    assert pg.consume("n1", 1e12)
    killed = _sql(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,))
    assert killed and all(row[0] for row in killed)
    outcomes: list[object] = []
    for _ in range(3):
        try:
            outcomes.append(pg.consume("n1", 1e12))
        except LedgerUnavailable:
            outcomes.append("unavailable")
    pg.close()
    assert True not in outcomes, "a spent nonce was accepted again after a reconnect"
    assert outcomes[-1] is False


def test_a_closed_store_is_unavailable(pg: PostgresStore) -> None:
    pg.close()
    with pytest.raises(LedgerUnavailable):
        pg.consume("n1", 1.0)


@pytest.mark.parametrize("key", ["a\x00b", "\ud800"])
def test_text_postgresql_cannot_hold_is_refused_and_nothing_is_written(pg: PostgresStore, key: str) -> None:
    for attempt in (lambda: pg.consume(key, 1.0), lambda: _claim(pg, key), lambda: pg.deny(key)):
        with pytest.raises(LedgerUnavailable):
            attempt()
    assert pg.entries() == [] and pg.consume("fine", 1.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(min_size=1, max_size=200))
def test_any_key_round_trips_or_is_refused_as_unavailable(pg: PostgresStore, key: str) -> None:
    """Keys come from the agent's arguments: whatever the text, a clean answer or LedgerUnavailable."""
    try:
        claim = _claim(pg, key)
    except LedgerUnavailable:
        assert "\x00" in key or any(0xD800 <= ord(c) <= 0xDFFF for c in key)
        return
    assert pg.lookup(key) == claim.record or not claim.created
    assert pg.release_pending(key) == claim.created or not claim.created


# -- URLs --------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_open_store_takes_both_postgres_schemes(pg_url: str, scheme: str) -> None:
    store = open_store(scheme + pg_url[len("postgresql") :])
    try:
        assert isinstance(store, PostgresStore) and isinstance(store, Store)
        assert store.consume("n", 1.0)
    finally:
        store.close()


def test_open_store_still_opens_sqlite(tmp_path: Any) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    assert isinstance(store, SQLiteStore)
    store.close()


@pytest.mark.parametrize(
    "url", ["mysql://root:hunter2@db/x", "hunter2", "", "postgresql+psycopg://u:hunter2@h/d", "sqlite:/x.db"]
)
def test_a_url_that_names_no_store_is_a_config_error_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert "hunter2" not in str(caught.value)


def test_a_postgres_url_without_the_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    with pytest.raises(ConfigError, match=r"pip install -c constraints.txt -e '\.\[postgres\]'"):
        open_store("postgresql://u@127.0.0.1/db")


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:p@h:5/d?sslmode=require") == "postgresql://u:***@h:5/d?sslmode=require"
    assert redact("postgresql://u@h/d") == "postgresql://u@h/d"


def test_importing_policyguard_and_the_store_modules_loads_no_psycopg() -> None:
    code = (
        "import sys, policyguard, policyguard.enforcement.storeurl, policyguard.enforcement.pgstore\n"
        "print([m for m in ('psycopg', 'psycopg_pool') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
