"""The store on PostgreSQL: nonces, denials and the effect ledger shared by several hosts.

:class:`PostgresStore` keeps the :class:`~policyguard.enforcement.store.NonceStore` and
:class:`~policyguard.enforcement.store.Ledger` contract of
:class:`~policyguard.enforcement.store.SQLiteStore`, so several gateway replicas behind a
load balancer spend a nonce or an idempotency key once between them. psycopg 3
and psycopg_pool are imported when a store is opened, never by ``import
policyguard`` (extra ``[postgres]``).

Which guarantees of the database carry which promise, and why these:

- *A nonce, a denial, a key is taken once*: primary keys with ``INSERT ... ON
  CONFLICT DO NOTHING``. The unique index decides the race between replicas; a
  second inserter waits for the first one's transaction and then sees the
  conflict. One statement, no retry loop, no isolation level above the default.
- *The refund ceiling* (``enforce_captured``): the claim is one call of the
  server-side function ``policyguard_claim`` (created by the migration: one
  round trip, and the lock is held for server time only). It first takes
  ``SELECT ... FROM captures ... FOR UPDATE``, a row lock, so enforced claims
  against one transaction run one after the other and each reads the running
  ``claimed`` sum that the previous one committed (READ COMMITTED gives every
  statement a fresh snapshot). Row locks and not SERIALIZABLE: only claims on
  the *same* transaction wait for each other, and nothing has to be retried
  under load. A claim without the ceiling checks nothing, so it takes no lock:
  it is ordered by the unique key and bumps ``claimed`` with an atomic upsert.
- *A claim is wholly there or absent*: the effect row and the ``claimed`` bump
  are one transaction; a process killed in the middle leaves neither (the server
  rolls back when the connection drops).
- *A session's events are numbered 1, 2, ... without gaps or repeats*
  (:mod:`policyguard.session.sql`): an append first takes a transaction-scoped
  advisory lock on the session id, so appends to one session run one after the
  other and appends to different sessions do not wait for each other; the
  primary key ``(session_id, seq)`` backs it up. A read is one statement (one
  snapshot), so it never sees a session half-evicted. An append to a session whose
  newest number this store saw is one call of ``policyguard_append_events``, which
  takes the same lock and appends only if the session still ends there
  (:meth:`PostgresStore.append_events`).
- *One session's decisions one after the other* (:meth:`PostgresStore.hold`): a
  session-level advisory lock on a connection of its own
  (:mod:`policyguard.enforcement.pgholds`), released by the unlock, or by the
  server when the holder's connection or process dies.
- No deadlocks by construction: every transaction takes its locks in the order
  captures row, effects row, claimed row (a session append: its session's
  lock, then only locks it can take without waiting). Should the server still report a
  deadlock, the claim fails as :class:`~policyguard.enforcement.store.LedgerUnavailable`
  (``release_pending`` and the migration retry a few times first).

Every server, network, pool or timeout failure is raised as
:class:`~policyguard.enforcement.store.LedgerUnavailable` (inconclusive, never "no
effect"); ``statement_timeout`` and ``lock_timeout`` bound every wait. So is a
value PostgreSQL cannot hold as text (a NUL character, which SQLite would
store, or a lone surrogate): the call is refused, never half-recorded.

Schema: created on first use and versioned in table ``schema_version``
(:data:`SCHEMA_VERSION`). Migrations run in one transaction under an advisory
lock, so replicas that start together migrate once; a database written by a
newer PolicyGuard is refused rather than misread. The tables go in the first
schema of the connection's ``search_path``, or in ``schema`` (created if need
be) when one is given, so several deployments can share one database.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from policyguard.distribution import install_hint
from policyguard.session import sql as session_sql
from policyguard.session.events import NewEvent, SessionEvent, numbered
from policyguard.session.store import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_RETENTION_S,
    SessionHold,
    check_session_id,
    session_limits,
)

from .pgholds import PgHolds
from .store import EFFECT_COLUMNS, EffectClaim, EffectRecord, LedgerUnavailable, effect_record, not_text

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

SCHEMA_VERSION = 3

# The claim as one server-side statement: the row lock on the captures row is held for
# microseconds of server time, not for several client round trips, so claims on one hot
# transaction queue briefly. Each statement inside takes a fresh READ COMMITTED snapshot
# (the function is VOLATILE), so the claimed sum read after the lock includes every
# claim committed before it. search_path is bound at creation: the function always
# works on the tables of the schema it was created in.
_CLAIM_FUNCTION = """
CREATE FUNCTION policyguard_claim(
    p_key TEXT, p_tool TEXT, p_tx TEXT, p_amount DOUBLE PRECISION, p_currency TEXT, p_sha TEXT,
    p_enforce BOOLEAN, p_now DOUBLE PRECISION,
    OUT o_outcome TEXT, OUT o_spent DOUBLE PRECISION, OUT o_ceiling DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    IF p_enforce THEN
        SELECT c.amount INTO o_ceiling FROM captures c WHERE c.transaction_id = p_tx FOR UPDATE;
    END IF;
    PERFORM 1 FROM effects e WHERE e.idempotency_key = p_key;
    IF FOUND THEN
        o_outcome := 'existing';
        RETURN;
    END IF;
    IF p_enforce THEN
        IF o_ceiling IS NULL THEN
            o_outcome := 'unknown';
            RETURN;
        END IF;
        SELECT k.amount INTO o_spent FROM claimed k WHERE k.transaction_id = p_tx;
        o_spent := COALESCE(o_spent, 0);
        IF o_spent + p_amount > o_ceiling + 1e-9 THEN
            o_outcome := 'exceeds';
            RETURN;
        END IF;
    END IF;
    INSERT INTO effects (idempotency_key, tool, transaction_id, amount, currency, args_sha256, status, created_at)
        VALUES (p_key, p_tool, p_tx, p_amount, p_currency, p_sha, 'pending', p_now)
        ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        o_outcome := 'existing';
        RETURN;
    END IF;
    INSERT INTO claimed AS k (transaction_id, amount) VALUES (p_tx, p_amount)
        ON CONFLICT (transaction_id) DO UPDATE SET amount = k.amount + excluded.amount;
    o_outcome := 'created';
END
$$"""

# The first key of every session lock (pg_advisory_xact_lock(int, int)); the second is the id's hash.
_SESSION_LOCKS = 0x70675373  # "pgSs"

# A session append as one statement, when the store knows the session's newest number: it takes the lock the
# full append takes (session.sql.append), then appends only if the live, unexpired, unevicted session still ends
# at p_after. False changes nothing; the caller then runs the full append, which also says why one cannot be.
# The bodies come as one JSON array of strings: psycopg escapes a text[] parameter in Python, character by
# character (most of the append's client time for JSON bodies), and json.dumps does it in C.
_APPEND_FUNCTION = f"""
CREATE FUNCTION policyguard_append_events(
    p_session TEXT, p_after BIGINT, p_bodies TEXT, p_now DOUBLE PRECISION, p_cutoff DOUBLE PRECISION)
RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({_SESSION_LOCKS}, hashtext(p_session));
    PERFORM 1 FROM sessions s
        WHERE s.session_id = p_session AND s.last_seq = p_after AND s.written_at >= p_cutoff;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    PERFORM 1 FROM session_tombstones t WHERE t.session_id = p_session;
    IF FOUND THEN
        RETURN FALSE;
    END IF;
    INSERT INTO session_events (session_id, seq, at, body)
        SELECT p_session, p_after + u.n, p_now, u.body
        FROM json_array_elements_text(p_bodies::json) WITH ORDINALITY AS u(body, n);
    UPDATE sessions SET last_seq = p_after + json_array_length(p_bodies::json), written_at = p_now
        WHERE session_id = p_session;
    RETURN TRUE;
END
$$"""

# (version, statements): applied in order to a database below that version. Never edit a shipped entry.
_MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "CREATE TABLE nonces (nonce TEXT PRIMARY KEY, expires_at DOUBLE PRECISION NOT NULL)",
            "CREATE INDEX nonces_by_expiry ON nonces (expires_at)",
            "CREATE TABLE denials (call_id TEXT PRIMARY KEY, denied_at DOUBLE PRECISION NOT NULL)",
            "CREATE TABLE effects ("
            " idempotency_key TEXT PRIMARY KEY,"
            " tool TEXT NOT NULL,"
            " transaction_id TEXT NOT NULL,"
            " amount DOUBLE PRECISION NOT NULL,"
            " currency TEXT,"
            " args_sha256 TEXT NOT NULL,"
            " status TEXT NOT NULL CHECK (status IN ('pending', 'committed')),"
            " result_json TEXT,"
            " created_at DOUBLE PRECISION NOT NULL,"
            " completed_at DOUBLE PRECISION,"
            " seq BIGINT GENERATED ALWAYS AS IDENTITY)",
            "CREATE INDEX effects_by_transaction ON effects (transaction_id, status)",
            "CREATE TABLE captures (transaction_id TEXT PRIMARY KEY, amount DOUBLE PRECISION NOT NULL)",
            "CREATE TABLE claimed (transaction_id TEXT PRIMARY KEY, amount DOUBLE PRECISION NOT NULL)",
            _CLAIM_FUNCTION,
        ),
    ),
    (
        2,
        (
            "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL,"
            " written_at DOUBLE PRECISION NOT NULL)",
            "CREATE INDEX sessions_by_written ON sessions (written_at)",
            "CREATE TABLE session_events (session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, seq))",
            "CREATE TABLE session_tombstones (session_id TEXT PRIMARY KEY, evicted_at DOUBLE PRECISION NOT NULL)",
            "CREATE INDEX session_tombstones_by_age ON session_tombstones (evicted_at)",
        ),
    ),
    (3, (_APPEND_FUNCTION,)),
)
# pg_advisory_xact_lock key serialising migrations of every PolicyGuard store in one database.
_MIGRATION_LOCK = 0x706F6C6779  # "polgy"
_RETRIES = 5
_NEWEST_KEPT = 65_536  # sessions whose newest event number a store remembers (forgotten all at once past it)
_SESSIONS = session_sql.Dialect(
    param="%s",
    lock=f"SELECT pg_advisory_xact_lock({_SESSION_LOCKS}, hashtext(?))",
    try_lock=f"SELECT pg_try_advisory_xact_lock({_SESSION_LOCKS}, hashtext(?))",
    returning=True,  # appends run pipelined (append_events): a DELETE's rowcount is not known in time
)
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_SELECT_EFFECT = f"SELECT {EFFECT_COLUMNS} FROM effects WHERE idempotency_key = %s"


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparsable store URL>"


class PostgresStore:
    """Nonces, denials and the effect ledger in one PostgreSQL database (see the module docstring).

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``). One pool of at
    most ``max_size`` connections per store; ``connect_timeout_s`` bounds
    opening, ``timeout_s`` bounds waiting for a pooled connection, a statement
    and a lock. An unreachable server raises :class:`LedgerUnavailable` here.
    ``schema`` (lower-case letters, digits, ``_``) puts the tables in that schema.
    Session records are bounded by ``max_session_events``, ``session_retention_s``
    and ``max_sessions`` (None: no count limit), as in
    :class:`~policyguard.enforcement.store.SQLiteStore`. Session holds
    (:meth:`hold`) use connections of their own, at most ``max_size`` at once.
    Thread-safe; open one store per process (after a fork, never inherit one).
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 16,
        connect_timeout_s: float = 5.0,
        timeout_s: float = 10.0,
        schema: str | None = None,
        clock: Callable[[], float] = time.time,
        max_session_events: int = DEFAULT_MAX_EVENTS,
        session_retention_s: float = DEFAULT_RETENTION_S,
        max_sessions: int | None = None,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema {schema!r}: use 1-63 lower-case letters, digits and '_'")
        if not 1 <= min_size <= max_size:
            raise ValueError("need 1 <= min_size <= max_size")
        if connect_timeout_s <= 0 or timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        try:
            import psycopg  # noqa: F401
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LedgerUnavailable(
                f"PostgresStore needs psycopg and psycopg_pool: {install_hint('postgres')}"
            ) from exc
        self.session_limits = session_limits(
            max_events=max_session_events, retention_s=session_retention_s, max_sessions=max_sessions
        )
        self.url = redact(url)
        self.schema = schema
        self._clock = clock
        self._timeout_ms = max(1, int(timeout_s * 1000))
        self._conninfo = url  # with its password: holds open connections of their own
        self._connect_timeout_s = connect_timeout_s
        self._max_held = max_size
        self._holds: PgHolds | None = None
        self._holds_lock = threading.Lock()
        self._newest: dict[str, int] = {}  # session id -> its newest event number seen here (see append_events)
        self._pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout_s))},
            configure=self._configure,
            timeout=timeout_s,
            open=False,
            name="policyguard-store",
        )
        try:
            with self._errors():
                self._pool.open(wait=True, timeout=connect_timeout_s)
            self._migrate()
        except BaseException:
            self._pool.close(timeout=1.0)
            raise

    # -- connections ---------------------------------------------------------

    def _configure(self, conn: Connection[Any]) -> None:
        conn.execute(f"SET statement_timeout = {self._timeout_ms}")
        conn.execute(f"SET lock_timeout = {self._timeout_ms}")
        if self.schema is not None:
            conn.execute(f'SET search_path = "{self.schema}"')  # type: ignore[arg-type]  # validated name

    @contextmanager
    def _errors(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise LedgerUnavailable(f"{self.url}: {_first_line(exc)}") from exc
        except UnicodeEncodeError as exc:  # a lone surrogate in a key: it cannot be sent, so nothing is known
            raise not_text(self.url, exc) from exc

    @contextmanager
    def _conn(self) -> Iterator[Connection[Any]]:
        """A pooled autocommit connection: one statement is one transaction."""
        with self._errors(), self._pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Connection[Any]]:
        """One transaction on a pooled connection, for tables kept beside the store's (the approval queue).

        Any database error inside becomes :class:`LedgerUnavailable`; any
        exception rolls the transaction back.
        """
        with self._conn() as conn, conn.transaction():
            yield conn

    def _in_transaction(self, work: Callable[[Connection[Any]], Any], *, pipelined: bool = False) -> Any:
        """Run ``work`` in one transaction; retry it on a deadlock or serialization failure.

        ``pipelined``: in psycopg's pipeline mode, statements are sent without waiting for each answer until
        ``work`` reads a result (a session append: ``BEGIN``, the lock and the state read in one round trip,
        the inserts and ``COMMIT`` in one more, instead of six). Each statement still runs in order, after
        the one before it, so the lock is held before the state is read."""
        from psycopg import errors

        for attempt in range(_RETRIES):
            try:
                with self._conn() as conn, conn.pipeline() if pipelined else nullcontext(), conn.transaction():
                    return work(conn)
            except LedgerUnavailable as exc:
                retryable = isinstance(exc.__cause__, (errors.DeadlockDetected, errors.SerializationFailure))
                if not retryable or attempt == _RETRIES - 1:
                    raise
                time.sleep(0.005 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _migrate(self) -> None:
        def work(conn: Connection[Any]) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            if self.schema is not None:
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')  # type: ignore[arg-type]
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise LedgerUnavailable(
                    f"{self.url}: schema version {version} is newer than this PolicyGuard ({SCHEMA_VERSION})"
                )
            for target, statements in _MIGRATIONS:
                if target > version:
                    for statement in statements:
                        conn.execute(statement)  # type: ignore[arg-type]  # literal SQL from this module
                    conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (target,))

        self._in_transaction(work)

    def close(self) -> None:
        """Close the pool (every connection this store opened); a hold still out closes its own when released."""
        with self._holds_lock:
            if self._holds is not None:
                self._holds.close()
        self._pool.close(timeout=5.0)

    # -- SessionStore --------------------------------------------------------

    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        """Append ``events`` after the session's newest; one statement when this store knows that number.

        The store remembers the newest number each session had when this process last appended to it or read
        it. Numbered after it, the events go in one call of ``policyguard_append_events``, which appends them
        only if the session still ends there (under the lock the full append takes). Otherwise (a session new
        here, another replica appended meanwhile, one evicted, expired or full) nothing was written and the
        full append runs: a wrong guess costs a statement, never a wrong number."""
        now = float(self._clock())
        limits = self.session_limits
        after = self._newest.get(session_id)
        added = self._numbered(events, after, now) if after is not None else None
        if added and after is not None:
            bodies = json.dumps([session_sql.event_body(event) for event in added])
            with self._conn() as conn:
                row = conn.execute(
                    "SELECT policyguard_append_events(%s, %s, %s, %s, %s)",
                    (session_id, after, bodies, now, now - limits.retention_s),
                ).fetchone()
            if row is not None and row[0] is True:
                self._saw(session_id, added[-1].seq)
                return added
        self._newest.pop(session_id, None)
        done = self._in_transaction(
            lambda conn: session_sql.append(conn, _SESSIONS, limits, session_id, events, now), pipelined=True
        )
        if isinstance(done, Exception):
            raise done
        if done:
            self._saw(session_id, done[-1].seq)
        return list(done)

    def session_events(self, session_id: str, after: int = 0) -> list[SessionEvent]:
        now = float(self._clock())
        with self._conn() as conn:
            events = session_sql.read(conn, _SESSIONS, self.session_limits, session_id, after, now)
        if events:
            self._saw(session_id, events[-1].seq)
        return events

    def _numbered(self, events: Sequence[NewEvent], after: int, now: float) -> list[SessionEvent] | None:
        """``events`` numbered after ``after`` if they fit the session's limit; None leaves it to the full append
        (which raises what is wrong, in its own order: evicted before full before a bad relative answer)."""
        if not events or self.session_limits.room("", after, len(events)) is not None:
            return None
        try:
            return numbered(list(events), after, now)
        except ValueError:
            return None

    def _saw(self, session_id: str, seq: int) -> None:
        """Remember ``seq`` as the session's newest number (a guess for the next append; bounded)."""
        newest = self._newest
        if len(newest) >= _NEWEST_KEPT and session_id not in newest:
            newest.clear()
        newest[session_id] = seq

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        """The session's decision lock among every process using this database (see :mod:`.pgholds`)."""
        check_session_id(session_id)
        with self._holds_lock:
            if self._holds is None:
                if self._pool.closed:
                    raise LedgerUnavailable(f"{self.url}: the store is closed")
                self._holds = PgHolds(
                    self._conninfo,
                    max_held=self._max_held,
                    connect_timeout_s=self._connect_timeout_s,
                    timeout_ms=self._timeout_ms,
                    errors=self._errors,
                )
            holds = self._holds
        return holds.hold(session_id, timeout)

    # -- NonceStore ----------------------------------------------------------

    def consume(self, nonce: str, expires_at: float) -> bool:
        with self._conn() as conn:
            cursor = conn.execute(
                "INSERT INTO nonces (nonce, expires_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (nonce, float(expires_at)),
            )
            return cursor.rowcount == 1

    def deny(self, call_id: str) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO denials (call_id, denied_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (call_id, float(self._clock())),
            )

    def is_denied(self, call_id: str) -> bool:
        with self._conn() as conn:
            return conn.execute("SELECT 1 FROM denials WHERE call_id = %s", (call_id,)).fetchone() is not None

    def any_denied(self, keys: Sequence[str]) -> bool:
        """:meth:`is_denied` for several keys in one round trip."""
        if not keys:
            return False
        with self._conn() as conn:
            found = conn.execute("SELECT 1 FROM denials WHERE call_id = ANY(%s) LIMIT 1", (list(keys),)).fetchone()
            return found is not None

    def purge_expired(self, now: float) -> int:
        with self._conn() as conn:
            return conn.execute("DELETE FROM nonces WHERE expires_at < %s", (float(now),)).rowcount

    # -- Ledger --------------------------------------------------------------

    def begin_effect(
        self,
        idempotency_key: str,
        *,
        tool: str,
        transaction_id: str,
        amount: float,
        currency: str | None,
        args_sha256: str,
        enforce_captured: bool = False,
    ) -> EffectClaim:
        """Claim ``idempotency_key`` or return its existing record, in one transaction.

        With ``enforce_captured`` the claim is refused (``refusal`` set, nothing
        written) unless a captured amount is known for the transaction and
        committed plus pending amounts plus ``amount`` stay within it; the
        captures row is locked for the check, so concurrent claims on one
        transaction cannot both pass it.
        """

        now = float(self._clock())
        for _ in range(_RETRIES):
            with self._conn() as conn:
                row = conn.execute(
                    "SELECT o_outcome, o_spent, o_ceiling FROM policyguard_claim(%s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        idempotency_key,
                        tool,
                        transaction_id,
                        float(amount),
                        currency,
                        args_sha256,
                        enforce_captured,
                        now,
                    ),
                ).fetchone()
                if row is None:  # pragma: no cover - the function always returns one row
                    raise LedgerUnavailable(f"{self.url}: policyguard_claim returned nothing")
                outcome, spent, ceiling = row
                if outcome == "existing":
                    existing = conn.execute(_SELECT_EFFECT, (idempotency_key,)).fetchone()
                    if existing is None:
                        continue  # released between the claim and this read: claim again
                    return EffectClaim(created=False, record=effect_record(existing))
            if outcome == "unknown":
                return EffectClaim(created=False, record=None, refusal="captured amount unknown")
            if outcome == "exceeds":
                return EffectClaim(
                    created=False,
                    record=None,
                    refusal=f"would exceed captured: {spent:g} already + {amount:g} > {ceiling:g}",
                )
            record = EffectRecord(
                idempotency_key=idempotency_key,
                tool=tool,
                transaction_id=transaction_id,
                amount=amount,
                currency=currency,
                args_sha256=args_sha256,
                status="pending",
                created_at=now,
            )
            return EffectClaim(created=True, record=record)
        raise LedgerUnavailable(f"{self.url}: key {idempotency_key!r} kept changing under the claim; try again")

    def complete_effect(self, idempotency_key: str, result_json: str) -> None:
        """Mark a pending claim committed with the tool's result. Unknown key: LedgerUnavailable."""
        with self._conn() as conn:
            cursor = conn.execute(
                "UPDATE effects SET status = 'committed', result_json = %s, completed_at = %s "
                "WHERE idempotency_key = %s AND status = 'pending'",
                (result_json, float(self._clock()), idempotency_key),
            )
            if cursor.rowcount != 1:
                raise LedgerUnavailable(f"no pending effect with idempotency key {idempotency_key!r}")

    def release_pending(self, idempotency_key: str) -> bool:
        """Drop a pending claim after an operator confirmed downstream that no effect happened."""

        def work(conn: Connection[Any]) -> bool:
            row = conn.execute(
                "DELETE FROM effects WHERE idempotency_key = %s AND status = 'pending' "
                "RETURNING transaction_id, amount",
                (idempotency_key,),
            ).fetchone()
            if row is None:
                return False
            conn.execute("UPDATE claimed SET amount = amount - %s WHERE transaction_id = %s", (row[1], row[0]))
            return True

        return bool(self._in_transaction(work))

    def lookup(self, idempotency_key: str) -> EffectRecord | None:
        with self._conn() as conn:
            row = conn.execute(_SELECT_EFFECT, (idempotency_key,)).fetchone()
        return effect_record(row) if row is not None else None

    def total(self, transaction_id: str, tool: str | None = None) -> float:
        sql = "SELECT COALESCE(SUM(amount), 0) FROM effects WHERE transaction_id = %s AND status = 'committed'"
        params: tuple[str, ...] = (transaction_id,)
        if tool is not None:
            sql += " AND tool = %s"
            params += (tool,)
        with self._conn() as conn:
            row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]  # literal SQL
        return float(row[0]) if row is not None else 0.0

    def captured(self, transaction_id: str) -> float | None:
        with self._conn() as conn:
            row = conn.execute("SELECT amount FROM captures WHERE transaction_id = %s", (transaction_id,)).fetchone()
        return float(row[0]) if row is not None else None

    def set_captured(self, transaction_id: str, amount: float) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO captures (transaction_id, amount) VALUES (%s, %s) "
                "ON CONFLICT (transaction_id) DO UPDATE SET amount = excluded.amount",
                (transaction_id, float(amount)),
            )

    def entries(self) -> list[EffectRecord]:
        """Every effect, pending or committed, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT {EFFECT_COLUMNS} FROM effects ORDER BY created_at, seq").fetchall()
        return [effect_record(row) for row in rows]


def drop_schema(url: str, schema: str) -> None:
    """Delete ``schema`` and every table in it (a scratch store's cleanup); LedgerUnavailable on failure."""
    import psycopg

    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema {schema!r}: use 1-63 lower-case letters, digits and '_'")
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]  # validated name
    except psycopg.Error as exc:
        raise LedgerUnavailable(f"{redact(url)}: cannot drop schema {schema}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
