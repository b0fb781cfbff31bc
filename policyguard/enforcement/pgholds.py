"""A session's decision lock on PostgreSQL: a session-level advisory lock on a connection of its own.

:meth:`PostgresStore.hold <policyguard.enforcement.pgstore.PostgresStore.hold>`
takes ``pg_advisory_lock(HOLDS, hashtext(session_id))`` on a connection
reserved for that hold until it is released; the unlock returns the connection
to a small idle list, and a connection that fails (or whose unlock does not
answer true) is closed instead, which makes the server drop its locks. So does
the death of the holder's process: its connections close, the server ends
their backends and frees the locks. (A host that vanishes without closing its
TCP connections is noticed after the server's TCP keepalive.)

Why a connection of its own and not one of the store's pool: a decision holds
the lock for seconds (a model call) while its appends and reads use the pool;
holders taking pool connections could starve the very appends they wait on.
At most ``max_held`` holds (and waits) run at once per store; one more waits
for a slot within its timeout, then gets None.

How it waits: ``pg_try_advisory_lock`` first (one round trip when nobody holds
the session); if taken, ``pg_advisory_lock`` under a transaction-local
``lock_timeout`` of the time left, so the server hands the lock over the
moment it is released, in the order asked. The key space (first key
:data:`HOLDS`) differs from the append's transaction lock
(:mod:`policyguard.enforcement.pgstore`), so a hold and an append never wait
for each other; two sessions whose 32-bit ``hashtext`` meet only serialize.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from policyguard.session.holds import wait_s
from policyguard.session.store import Released, SessionHold

from .store import LedgerUnavailable

if TYPE_CHECKING:
    from psycopg import Connection

HOLDS = 0x70674868  # "pgHh": the first key of every hold (the append's lock uses "pgSs")
APPLICATION = "policyguard-hold"  # the hold connections' application_name (pg_stat_activity shows them)
_TRY = f"SELECT pg_try_advisory_lock({HOLDS}, hashtext(%s))"
_WAIT = f"SELECT pg_advisory_lock({HOLDS}, hashtext(%s))"
_UNLOCK = f"SELECT pg_advisory_unlock({HOLDS}, hashtext(%s))"


class PgHolds:
    """The holds of one :class:`~policyguard.enforcement.pgstore.PostgresStore`, on connections of their own."""

    def __init__(
        self,
        conninfo: str,
        *,
        max_held: int,
        connect_timeout_s: float,
        timeout_ms: int,
        errors: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._conninfo = conninfo
        self._connect_timeout = max(1, int(connect_timeout_s))
        self._timeout_ms = timeout_ms
        self._errors = errors
        self._slots = threading.BoundedSemaphore(max_held)
        self._idle: list[Connection[Any]] = []
        self._mutex = threading.Lock()
        self._closed = False

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        wait = wait_s(timeout)
        deadline = time.monotonic() + wait
        if not (self._slots.acquire(timeout=wait) if wait > 0 else self._slots.acquire(blocking=False)):
            return None
        try:
            with self._errors():
                conn = self._locked(session_id, deadline)
        except BaseException:
            self._slots.release()
            raise
        if conn is None:
            self._slots.release()
            return None
        return Released(lambda: self._release(conn, session_id))

    def close(self) -> None:
        """Close the idle connections; a hold still out closes its own when released."""
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _locked(self, session_id: str, deadline: float) -> Connection[Any] | None:
        """A connection holding the session's lock, or None (the connection went back idle) when it stayed taken."""
        import psycopg

        conn, reused = self._connection()
        try:
            try:
                row = conn.execute(_TRY, (session_id,)).fetchone()
            except psycopg.OperationalError:
                if not reused:
                    raise
                conn.close()  # an idle connection the server dropped meanwhile: one fresh try
                conn, _ = self._connection(fresh=True)
                row = conn.execute(_TRY, (session_id,)).fetchone()
            if row is not None and row[0]:
                return conn
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                self._put(conn)
                return None
            try:
                with conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = {left_ms}")  # type: ignore[arg-type]  # an int
                    conn.execute(f"SET LOCAL statement_timeout = {left_ms + 5000}")  # type: ignore[arg-type]
                    conn.execute(_WAIT, (session_id,))
            except psycopg.errors.LockNotAvailable:
                self._put(conn)
                return None
            return conn
        except BaseException:
            conn.close()  # whatever it holds, the server drops with it
            raise

    def _connection(self, *, fresh: bool = False) -> tuple[Connection[Any], bool]:
        import psycopg

        with self._mutex:
            if self._closed:
                raise LedgerUnavailable("the store is closed")
            if self._idle and not fresh:
                return self._idle.pop(), True
        conn = psycopg.connect(
            self._conninfo, autocommit=True, connect_timeout=self._connect_timeout, application_name=APPLICATION
        )
        conn.execute(f"SET statement_timeout = {self._timeout_ms}")  # type: ignore[arg-type]  # an int
        return conn, False

    def _put(self, conn: Connection[Any]) -> None:
        with self._mutex:
            if not self._closed and not conn.closed:
                self._idle.append(conn)
                return
        conn.close()

    def _release(self, conn: Connection[Any], session_id: str) -> None:
        try:
            row = conn.execute(_UNLOCK, (session_id,)).fetchone()
            if row is not None and row[0]:
                self._put(conn)
            else:
                conn.close()
        except Exception:  # noqa: BLE001 - a broken connection: closing it is the unlock
            conn.close()
        finally:
            self._slots.release()
