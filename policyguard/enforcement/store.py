"""Durable state for the executor: spent grant nonces, recorded denials, the effect ledger.

Two small Protocols, :class:`NonceStore` and :class:`Ledger`, and one
implementation of both, :class:`SQLiteStore`, which also keeps session records
(:class:`~policyguard.session.SessionStore`, in the tables of
:mod:`policyguard.session.sql`). The executor and the grant
verifier depend on the Protocols only, so a deployment with several gateway
processes on several hosts can swap in a shared database.

Why a ledger and not just "call the tool once": an agent (or the infra under it)
retries. A retry must reuse the idempotency key, and the key is *claimed* in the
ledger before the side effect, in the same atomic step that decides whether this
attempt may proceed. A claim that was never completed (the process died, the
tool timed out) stays ``pending``: nobody may re-send it, somebody must look it
up by key first (the refund case, ``benchmarks/refund``).

Every storage failure is raised as :class:`LedgerUnavailable`. Callers must turn
that into *inconclusive*, never into "no effect happened".
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from policyguard.errors import PolicyGuardError
from policyguard.session import sql as session_sql
from policyguard.session.events import NewEvent, SessionEvent
from policyguard.session.holds import FileHolds, LocalHolds
from policyguard.session.store import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_RETENTION_S,
    Released,
    SessionHold,
    SessionStore,
    check_session_id,
    session_limits,
)

from .groupcommit import GroupCommitter

SCHEMA_VERSION = 2
T = TypeVar("T")

EffectStatus = Literal["pending", "committed"]


class LedgerUnavailable(PolicyGuardError):
    """The store could not be read or written. The outcome is unknown: inconclusive."""


class EffectRecord(BaseModel):
    """One side effect, keyed by its idempotency key."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    idempotency_key: str
    tool: str
    transaction_id: str
    amount: float
    currency: str | None = None
    args_sha256: str
    status: EffectStatus
    result_json: str | None = None
    created_at: float
    completed_at: float | None = None


class EffectClaim(BaseModel):
    """What :meth:`Ledger.begin_effect` found: a fresh claim (``created``) or the existing record.

    ``refusal`` is set (and nothing was claimed) when the caller asked the ledger
    to enforce the captured amount and the effect would exceed it, or when no
    captured amount is known.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    created: bool
    record: EffectRecord | None
    refusal: str | None = None


@runtime_checkable
class NonceStore(Protocol):
    """Spent grant nonces and per-call denials."""

    def consume(self, nonce: str, expires_at: float) -> bool:
        """Mark ``nonce`` spent. True only the first time, across threads and processes."""
        ...

    def deny(self, call_id: str) -> None:
        """Record a deny verdict under the key ``call_id``; it wins over any allow.

        The guard's keys name a call's identity (:mod:`policyguard.enforcement.scoped`); a
        bare call id refuses every call with that id.
        """
        ...

    def is_denied(self, call_id: str) -> bool: ...

    def purge_expired(self, now: float) -> int:
        """Forget nonces whose grant has expired (an expired grant fails anyway)."""
        ...


@runtime_checkable
class Ledger(Protocol):
    """The record of side effects with money amounts, keyed by idempotency key."""

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
        """Atomically claim the key (status ``pending``) or return the existing record."""
        ...

    def complete_effect(self, idempotency_key: str, result_json: str) -> None: ...

    def lookup(self, idempotency_key: str) -> EffectRecord | None: ...

    def total(self, transaction_id: str, tool: str | None = None) -> float:
        """Sum of committed amounts for the transaction (optionally one tool)."""
        ...

    def captured(self, transaction_id: str) -> float | None: ...

    def set_captured(self, transaction_id: str, amount: float) -> None: ...

    def entries(self) -> list[EffectRecord]: ...


@runtime_checkable
class Store(NonceStore, Ledger, SessionStore, Protocol):
    """What ``open_store(url)`` returns: the three contracts plus the operator's release and ``close``.

    Implemented by :class:`SQLiteStore` and :class:`policyguard.enforcement.pgstore.PostgresStore`.
    """

    def release_pending(self, idempotency_key: str) -> bool: ...

    def close(self) -> None: ...


class EffectRequest(BaseModel):
    """The arguments of :meth:`Ledger.begin_effect`, as one value for :meth:`SpendAndClaim.spend_and_claim`."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    idempotency_key: str
    tool: str
    transaction_id: str
    amount: float
    currency: str | None
    args_sha256: str
    enforce_captured: bool = False


class Spent(BaseModel):
    """What :meth:`SpendAndClaim.spend_and_claim` did.

    ``replayed``: the nonce was spent before; nothing was written. ``denied``:
    the nonce is now spent and a deny is recorded for the call; nothing was
    claimed. ``spent``: the nonce is now spent, no deny is recorded, and
    ``claim`` is what :meth:`Ledger.begin_effect` returned (None when no effect
    was asked for).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    outcome: Literal["spent", "replayed", "denied"]
    claim: EffectClaim | None = None


@runtime_checkable
class SpendAndClaim(Protocol):
    """Optional capability of a store that is both the :class:`NonceStore` and the :class:`Ledger`.

    One transaction does what the executor otherwise does in three: consume
    the grant's nonce, read the deny record for the call, and claim the effect.
    Each step decides exactly as its separate method would, in the same order
    (a deny recorded before the nonce is spent wins; a replayed nonce claims
    nothing; a denied call's nonce stays spent). The executor uses it when its
    grant verifier's nonce store implements it and is also its ledger (or no
    effect is claimed), and falls back to the separate calls otherwise, so a
    store need not implement it.
    """

    def spend_and_claim(
        self, nonce: str, expires_at: float, deny_keys: str | Sequence[str], effect: EffectRequest | None
    ) -> Spent:
        """Consume ``nonce``; if it was fresh, read the deny record; if none, claim ``effect``. One transaction.

        ``deny_keys``: the call is denied when a deny is recorded under any of them
        (:meth:`policyguard.enforcement.scoped.CallIdentity.deny_lookups`; one string is one key).
        """
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS nonces (
    nonce TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS denials (
    call_id TEXT PRIMARY KEY,
    denied_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    idempotency_key TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    amount REAL NOT NULL,
    currency TEXT,
    args_sha256 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'committed')),
    result_json TEXT,
    created_at REAL NOT NULL,
    completed_at REAL
);
CREATE INDEX IF NOT EXISTS effects_by_transaction ON effects (transaction_id, status);
CREATE TABLE IF NOT EXISTS captures (
    transaction_id TEXT PRIMARY KEY,
    amount REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS claimed (
    transaction_id TEXT PRIMARY KEY,
    amount REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    written_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_written ON sessions (written_at);
CREATE TABLE IF NOT EXISTS session_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_tombstones (
    session_id TEXT PRIMARY KEY,
    evicted_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS session_tombstones_by_age ON session_tombstones (evicted_at);
"""

EFFECT_FIELDS: tuple[str, ...] = tuple(EffectRecord.model_fields)
"""The effects table's columns, in :class:`EffectRecord`'s field order (shared by every store backend)."""
EFFECT_COLUMNS = ", ".join(EFFECT_FIELDS)


class SQLiteStore:
    """Nonces, denials and the effect ledger in one SQLite database.

    - Files use WAL mode, ``busy_timeout`` and one connection per thread;
      claims and nonce consumption run in ``BEGIN IMMEDIATE`` transactions, so
      they are atomic across threads *and* processes sharing the file.
    - ``":memory:"`` uses one connection guarded by a lock (a private memory
      database cannot be opened twice), so it is correct across threads of one
      process only.
    - ``synchronous`` is ``"FULL"`` (every commit is fsynced: a committed claim
      survives power loss) or ``"NORMAL"`` (in WAL mode a commit survives a
      process crash but the last commits may be lost on power loss; much faster).
    - ``group_commit=True`` (files only): writes from all threads queue on one
      shared connection; the first caller in the queue runs everything queued
      in one transaction, so concurrent callers share one fsync; each caller
      returns only after the COMMIT of its batch (see
      :mod:`policyguard.enforcement.groupcommit`). Reads keep their per-thread connections.
    - ``defer_completion=True`` (with group commit): :meth:`complete_effect`
      does not wait for its commit; it rides in the next batch (or a timer
      commits it within 50 ms). One fsync per guarded call instead of two; a
      completion lost in a crash leaves the claim ``pending`` (fails closed).
      Reads of effects in this store wait for deferred completions first.
    - It implements :class:`SpendAndClaim`: nonce, deny record and effect claim
      in one transaction.
    - Session records (:meth:`append_events`, :meth:`session_events`), bounded
      by ``max_session_events``, ``session_retention_s`` and ``max_sessions``
      (None: no count limit; retention bounds them), as
      :class:`~policyguard.session.MemorySessionStore` is. An append is one
      ``BEGIN IMMEDIATE`` transaction, so processes sharing the file number a
      session's events without gaps or repeats.
    - A session's decision lock (:meth:`hold`) is a byte-range lock on the
      sidecar file ``<path>.holds`` (:class:`~policyguard.session.holds.FileHolds`),
      not a transaction: ``BEGIN IMMEDIATE`` would lock the whole file for
      every session while a decision (a model call) runs. ``":memory:"``
      holds among this store's threads only.

    Schema: versioned with ``PRAGMA user_version`` (:data:`SCHEMA_VERSION`; 2
    added the session tables, created in a version 1 file when it is opened);
    a file written by a newer schema is refused rather than misread.

    Several gateway processes on several hosts share a
    :class:`policyguard.enforcement.pgstore.PostgresStore` instead (same contract, chosen
    by URL with :func:`policyguard.enforcement.storeurl.open_store`).
    """

    def __init__(
        self,
        path: str = ":memory:",
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
        group_commit: bool = False,
        defer_completion: bool = False,
        max_session_events: int = DEFAULT_MAX_EVENTS,
        session_retention_s: float = DEFAULT_RETENTION_S,
        max_sessions: int | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be 'FULL' or 'NORMAL'")
        if group_commit and str(path) == ":memory:":
            raise ValueError("group commit needs a database file: a memory database has no fsync to share")
        if defer_completion and not group_commit:
            raise ValueError("defer_completion needs group_commit=True: the deferred write rides in a shared batch")
        self.defer_completion = defer_completion
        self.session_limits = session_limits(
            max_events=max_session_events, retention_s=session_retention_s, max_sessions=max_sessions
        )
        self.path = str(path)
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._memory = self.path == ":memory:"
        self._local = threading.local()
        self._lock = threading.RLock()
        self._all: list[sqlite3.Connection] = []
        self._shared: sqlite3.Connection | None = None
        self._committer: GroupCommitter | None = None
        self._memory_holds: LocalHolds[str] = LocalHolds()
        self._file_holds: FileHolds | None = None
        with self._tx(immediate=True) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerUnavailable(
                    f"{self.path}: schema version {version} is newer than this PolicyGuard ({SCHEMA_VERSION})"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if group_commit:
            wait_s = max(30.0, 2 * self.busy_timeout_ms / 1000)
            self._committer = GroupCommitter(self._open, LedgerUnavailable, wait_s=wait_s)

    @property
    def group_commit(self) -> bool:
        """Whether concurrent writes share transactions (see :mod:`policyguard.enforcement.groupcommit`)."""
        return self._committer is not None

    # -- connections ---------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if not self._memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"{self.path}: cannot open the store: {exc}") from exc
        with self._lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        if self._memory:
            with self._lock:
                if self._shared is None:
                    self._shared = self._open()
                yield self._shared
            return
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        yield conn

    @contextmanager
    def _tx(self, *, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction; any sqlite error becomes LedgerUnavailable (after rollback)."""
        with self._conn() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise LedgerUnavailable(f"{self.path}: {exc}") from exc
            except UnicodeEncodeError as exc:  # a lone surrogate in a key: it cannot be stored, nothing is known
                raise not_text(self.path, exc) from exc

    @contextmanager
    def transaction(self, *, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction on this store's database, for modules that keep their own tables in it
        (:mod:`policyguard.approvals.queue`). Errors are :class:`LedgerUnavailable`, as for the ledger."""
        with self._tx(immediate=immediate) as conn:
            yield conn

    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``op`` in a write transaction: the group committer's shared one, or one of its own."""
        if self._committer is not None:
            try:
                return self._committer.run(op)
            except UnicodeEncodeError as exc:
                raise not_text(self.path, exc) from exc
        with self._tx(immediate=True) as conn:
            return op(conn)

    def close(self) -> None:
        """Close every connection this store opened (in any thread); queued writes are committed first.
        Holds not yet released stay held until they are."""
        if self._committer is not None:
            self._committer.close()
        with self._lock:
            if self._file_holds is not None:
                self._file_holds.close()
                self._file_holds = None
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
            self._shared = None
            self._local = threading.local()

    # -- SessionStore --------------------------------------------------------

    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        now = float(self._clock())
        limits = self.session_limits
        done = self._write(lambda conn: session_sql.append(conn, session_sql.SQLITE, limits, session_id, events, now))
        if isinstance(done, Exception):
            raise done
        return done

    def session_events(self, session_id: str, after: int = 0) -> list[SessionEvent]:
        now = float(self._clock())
        with self._tx(immediate=False) as conn:
            return session_sql.read(conn, session_sql.SQLITE, self.session_limits, session_id, after, now)

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        """The session's decision lock among every process using this file (see the class docstring)."""
        check_session_id(session_id)
        if self._memory:
            if not self._memory_holds.acquire(session_id, timeout):
                return None
            return Released(lambda: self._memory_holds.release(session_id))
        try:
            with self._lock:
                if self._file_holds is None:
                    self._file_holds = FileHolds.open(self.path + ".holds")
                holds = self._file_holds
            byte = holds.acquire(session_id, timeout)
        except OSError as exc:
            raise LedgerUnavailable(f"{self.path}.holds: cannot lock session {session_id!r:.80}: {exc}") from exc
        if byte is None:
            return None
        return Released(lambda: holds.release(byte))

    # -- NonceStore ----------------------------------------------------------

    def consume(self, nonce: str, expires_at: float) -> bool:
        return self._write(lambda conn: _consume(conn, nonce, expires_at))

    def deny(self, call_id: str) -> None:
        now = self._clock()
        self._write(
            lambda conn: conn.execute(
                "INSERT INTO denials (call_id, denied_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (call_id, now)
            )
        )

    def is_denied(self, call_id: str) -> bool:
        with self._tx(immediate=False) as conn:
            return _is_denied(conn, call_id)

    def any_denied(self, keys: Sequence[str]) -> bool:
        """:meth:`is_denied` for several keys in one read."""
        if not keys:
            return False
        with self._tx(immediate=False) as conn:
            return _is_denied(conn, *keys)

    def purge_expired(self, now: float) -> int:
        return self._write(lambda conn: conn.execute("DELETE FROM nonces WHERE expires_at < ?", (now,)).rowcount)

    # -- SpendAndClaim -------------------------------------------------------

    def spend_and_claim(
        self, nonce: str, expires_at: float, deny_keys: str | Sequence[str], effect: EffectRequest | None
    ) -> Spent:
        """Consume ``nonce``, read the deny records under ``deny_keys``, claim ``effect``: one transaction."""
        keys = (deny_keys,) if isinstance(deny_keys, str) else tuple(deny_keys)

        def op(conn: sqlite3.Connection) -> Spent:
            if not _consume(conn, nonce, expires_at):
                return Spent(outcome="replayed")
            if effect is None:
                return Spent(outcome="denied") if _is_denied(conn, *keys) else Spent(outcome="spent")
            state = _claim_state(conn, effect, keys)
            if state[-1]:
                return Spent(outcome="denied")
            return Spent(outcome="spent", claim=self._claim(conn, effect, state))

        return self._write(op)

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
        """Claim ``idempotency_key`` or return its existing record, in one IMMEDIATE transaction.

        With ``enforce_captured`` the claim is refused (``refusal`` set, nothing
        written) unless a captured amount is known for the transaction and
        committed plus pending amounts plus ``amount`` stay within it. Pending
        claims count because their effect may already have happened. The
        running sum lives in table ``claimed`` (updated in the same
        transaction), so the check costs O(1) however many refunds a
        transaction has had.
        """
        request = EffectRequest(
            idempotency_key=idempotency_key,
            tool=tool,
            transaction_id=transaction_id,
            amount=amount,
            currency=currency,
            args_sha256=args_sha256,
            enforce_captured=enforce_captured,
        )
        return self._write(lambda conn: self._claim(conn, request, _claim_state(conn, request, ())))

    def _claim(self, conn: sqlite3.Connection, effect: EffectRequest, state: tuple[Any, ...]) -> EffectClaim:
        """Claim ``effect`` given its :func:`_claim_state` read in this same transaction."""
        if state[0] is not None:
            return EffectClaim(created=False, record=effect_record(state[: len(EFFECT_FIELDS)]))
        if effect.enforce_captured:
            captured, spent = state[len(EFFECT_FIELDS)], state[len(EFFECT_FIELDS) + 1]
            if captured is None:
                return EffectClaim(created=False, record=None, refusal="captured amount unknown")
            if spent + effect.amount > captured + 1e-9:
                return EffectClaim(
                    created=False,
                    record=None,
                    refusal=f"would exceed captured: {spent:g} already + {effect.amount:g} > {captured:g}",
                )
        now = float(self._clock())
        conn.execute(
            f"INSERT INTO effects ({EFFECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, ?, NULL)",
            (
                effect.idempotency_key,
                effect.tool,
                effect.transaction_id,
                effect.amount,
                effect.currency,
                effect.args_sha256,
                now,
            ),
        )
        conn.execute(
            "INSERT INTO claimed (transaction_id, amount) VALUES (?, ?) "
            "ON CONFLICT (transaction_id) DO UPDATE SET amount = amount + excluded.amount",
            (effect.transaction_id, effect.amount),
        )
        record = EffectRecord(
            idempotency_key=effect.idempotency_key,
            tool=effect.tool,
            transaction_id=effect.transaction_id,
            amount=effect.amount,
            currency=effect.currency,
            args_sha256=effect.args_sha256,
            status="pending",
            result_json=None,
            created_at=now,
            completed_at=None,
        )
        return EffectClaim(created=True, record=record)

    def complete_effect(self, idempotency_key: str, result_json: str) -> None:
        """Mark a pending claim committed with the tool's result. Unknown key: LedgerUnavailable.

        With ``defer_completion`` the write rides in the next batch and this
        returns at once (no error for an unknown key): until then, and for
        ever if the process dies first, the claim reads ``pending``, which
        refuses a re-send rather than allowing one.
        """
        now = self._clock()

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "UPDATE effects SET status = 'committed', result_json = ?, completed_at = ? "
                "WHERE idempotency_key = ? AND status = 'pending'",
                (result_json, now, idempotency_key),
            ).rowcount

        if self._committer is not None and self.defer_completion:
            self._committer.defer(op)
        elif self._write(op) != 1:
            raise LedgerUnavailable(f"no pending effect with idempotency key {idempotency_key!r}")

    def release_pending(self, idempotency_key: str) -> bool:
        """Drop a pending claim after an operator confirmed downstream that no effect happened."""

        def op(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "DELETE FROM effects WHERE idempotency_key = ? AND status = 'pending' RETURNING transaction_id, amount",
                (idempotency_key,),
            ).fetchone()
            if row is None:
                return False
            conn.execute("UPDATE claimed SET amount = amount - ? WHERE transaction_id = ?", (row[1], row[0]))
            return True

        return self._write(op)

    def _settled(self) -> None:
        """Before reading effects: commit deferred completions, so a read never shows an older status."""
        if self._committer is not None and self.defer_completion:
            self._committer.flush()

    def lookup(self, idempotency_key: str) -> EffectRecord | None:
        self._settled()
        with self._tx(immediate=False) as conn:
            row = conn.execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE idempotency_key = ?", (idempotency_key,)
            ).fetchone()
        return effect_record(row) if row is not None else None

    def total(self, transaction_id: str, tool: str | None = None) -> float:
        sql = "SELECT COALESCE(SUM(amount), 0) FROM effects WHERE transaction_id = ? AND status = 'committed'"
        params: tuple[str, ...] = (transaction_id,)
        if tool is not None:
            sql += " AND tool = ?"
            params += (tool,)
        self._settled()
        with self._tx(immediate=False) as conn:
            return float(conn.execute(sql, params).fetchone()[0])

    def captured(self, transaction_id: str) -> float | None:
        with self._tx(immediate=False) as conn:
            row = conn.execute("SELECT amount FROM captures WHERE transaction_id = ?", (transaction_id,)).fetchone()
        return float(row[0]) if row is not None else None

    def set_captured(self, transaction_id: str, amount: float) -> None:
        self._write(
            lambda conn: conn.execute(
                "INSERT INTO captures (transaction_id, amount) VALUES (?, ?) "
                "ON CONFLICT (transaction_id) DO UPDATE SET amount = excluded.amount",
                (transaction_id, amount),
            )
        )

    def entries(self) -> list[EffectRecord]:
        """Every effect, pending or committed, oldest first."""
        self._settled()
        with self._tx(immediate=False) as conn:
            rows = conn.execute(f"SELECT {EFFECT_COLUMNS} FROM effects ORDER BY created_at, rowid").fetchall()
        return [effect_record(row) for row in rows]


def _consume(conn: sqlite3.Connection, nonce: str, expires_at: float) -> bool:
    cursor = conn.execute(
        "INSERT INTO nonces (nonce, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (nonce, expires_at)
    )
    return cursor.rowcount == 1


_CLAIM_STATE = (
    f"SELECT {', '.join('e.' + name for name in EFFECT_FIELDS)}, c.amount, COALESCE(k.amount, 0), "
    "EXISTS (SELECT 1 FROM denials d WHERE d.call_id IN ({keys})) "
    "FROM (SELECT ? AS key, ? AS tx) q "
    "LEFT JOIN effects e ON e.idempotency_key = q.key "
    "LEFT JOIN captures c ON c.transaction_id = q.tx "
    "LEFT JOIN claimed k ON k.transaction_id = q.tx"
)


def _claim_state(conn: sqlite3.Connection, effect: EffectRequest, deny_keys: Sequence[str]) -> tuple[Any, ...]:
    """In one statement: the key's existing effect (or NULLs), the captured and claimed sums, whether denied
    (under any of ``deny_keys``; none: not denied)."""
    row: tuple[Any, ...] = conn.execute(
        _CLAIM_STATE.replace("{keys}", ", ".join("?" * len(deny_keys))),
        (*deny_keys, effect.idempotency_key, effect.transaction_id),
    ).fetchone()
    return row


def _is_denied(conn: sqlite3.Connection, *keys: str) -> bool:
    """Whether a deny is recorded under any of ``keys``."""
    marks = ", ".join("?" * len(keys))
    return conn.execute(f"SELECT 1 FROM denials WHERE call_id IN ({marks}) LIMIT 1", keys).fetchone() is not None


def effect_record(row: tuple[object, ...]) -> EffectRecord:
    """One row of the effects table (columns :data:`EFFECT_COLUMNS`) as a record."""
    return EffectRecord.model_validate(dict(zip(EFFECT_FIELDS, row, strict=True)))


def not_text(where: str, exc: UnicodeEncodeError) -> LedgerUnavailable:
    """A value the database cannot hold as text (a lone surrogate): nothing was stored, the outcome is unknown."""
    return LedgerUnavailable(f"{where}: a value is not valid UTF-8 text ({exc.reason})")
