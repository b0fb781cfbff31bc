"""Session records in SQL tables: the one append and the one read that both SQL stores run.

The tables (each store creates them with its own schema):

* ``sessions``: a row per live session: ``last_seq`` (its number of events) and
  ``written_at``;
* ``session_events``: primary key ``(session_id, seq)``, the time ``at``, and the
  event's other fields as JSON text in ``body`` (``arguments`` an object,
  ``content`` the text as the tool returned it, escaped to ASCII so any text
  survives, a NUL character included);
* ``session_tombstones``: the sessions evicted, and when.

A store runs :func:`append` in one write transaction that no other writer of
the same session can interleave with (SQLite: ``BEGIN IMMEDIATE``, one writer
for the whole file; PostgreSQL: a transaction-scoped advisory lock on the
session id, :attr:`Dialect.lock`). So the next number is ``last_seq + 1``, the
primary key only backs that up, and an append is wholly there or absent.
:func:`read` is one statement, so a record is never read half-evicted.

Limits are :class:`~.store.SessionLimits`, as in the memory store. A session
past retention reads as evicted at once; its rows go, and its tombstone is
written, when it is next written or when a new session sweeps (at most
:data:`SWEEP` old sessions per new one). Each eviction takes the evicted
session's lock without waiting (:attr:`Dialect.try_lock`): a session being
written at that moment is left for a later sweep, so two sweeps never wait for
each other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .events import NewEvent, SessionEvent, numbered
from .store import SessionError, SessionEvicted, SessionLimits, check_session_id

SWEEP = 64
_BODY_FIELDS = frozenset(NewEvent.model_fields)

_STATE = (
    "SELECT s.last_seq, s.written_at, t.session_id FROM (SELECT ? AS id) q "
    "LEFT JOIN sessions s ON s.session_id = q.id "
    "LEFT JOIN session_tombstones t ON t.session_id = q.id"
)


_READ = (
    "SELECT s.last_seq, s.written_at, t.session_id, e.seq, e.at, e.body FROM (SELECT ? AS id) q "
    "LEFT JOIN sessions s ON s.session_id = q.id "
    "LEFT JOIN session_tombstones t ON t.session_id = q.id "
    "LEFT JOIN session_events e ON e.session_id = s.session_id AND e.seq > ? "
    "ORDER BY e.seq"
)


class Dialect:
    """What differs between the SQL stores: the placeholder and the per-session lock."""

    __slots__ = ("param", "lock", "try_lock", "returning")

    def __init__(
        self, *, param: str = "?", lock: str | None = None, try_lock: str | None = None, returning: bool = False
    ) -> None:
        self.param = param
        self.lock = lock  # takes the session's lock until the transaction ends (parameter: the id)
        self.try_lock = try_lock  # the same without waiting: one row, true when taken
        # a DELETE says what it removed with RETURNING, not rowcount (in psycopg's pipeline mode the count is not
        # known until the next result is read; SQLite has RETURNING only since 3.35, so it keeps the count)
        self.returning = returning

    def sql(self, text: str) -> str:
        """``text`` (written with ``?`` placeholders) in this driver's placeholder style."""
        return text if self.param == "?" else text.replace("?", self.param)


SQLITE = Dialect()


class _State:
    __slots__ = ("last_seq", "written_at", "tombstoned")

    def __init__(self, *, last_seq: int | None, written_at: float | None, tombstoned: bool) -> None:
        self.last_seq = last_seq  # None: no live record
        self.written_at = written_at
        self.tombstoned = tombstoned


def _evicted(session_id: str) -> SessionEvicted:
    return SessionEvicted(f"session {session_id!r} was evicted")


def append(
    conn: Any, dialect: Dialect, limits: SessionLimits, session_id: str, events: Sequence[NewEvent], now: float
) -> list[SessionEvent] | SessionError:
    """Append ``events`` to the session, in the caller's write transaction: the numbered events, or the error
    to raise once the transaction is committed (an eviction it found is written, nothing else is)."""
    check_session_id(session_id)
    if dialect.lock is not None:
        conn.execute(dialect.sql(dialect.lock), (session_id,))
    state = _state(conn, dialect, session_id)
    if state.tombstoned:
        return _evicted(session_id)
    if state.written_at is not None and limits.expired(state.written_at, now):
        _evict(conn, dialect, limits, [session_id], now)
        return _evicted(session_id)
    have = state.last_seq or 0
    full = limits.room(session_id, have, len(events))
    if full is not None:
        return full
    added = numbered(list(events), have, now)
    if not added:
        return added
    conn.cursor().executemany(
        dialect.sql("INSERT INTO session_events (session_id, seq, at, body) VALUES (?, ?, ?, ?)"),
        [(session_id, event.seq, event.at, event_body(event)) for event in added],
    )
    conn.execute(
        dialect.sql(
            "INSERT INTO sessions (session_id, last_seq, written_at) VALUES (?, ?, ?) ON CONFLICT (session_id) "
            "DO UPDATE SET last_seq = excluded.last_seq, written_at = excluded.written_at"
        ),
        (session_id, added[-1].seq, now),
    )
    if state.last_seq is None:
        _sweep(conn, dialect, limits, session_id, now)
    return added


def read(
    conn: Any, dialect: Dialect, limits: SessionLimits, session_id: str, after: int, now: float
) -> list[SessionEvent]:
    """The session's events with ``seq > after``; raises :class:`SessionEvicted`.

    One statement, so one snapshot (and one round trip): the session's state and its events agree.
    """
    check_session_id(session_id)
    rows = conn.execute(dialect.sql(_READ), (session_id, max(after, 0))).fetchall()
    last_seq, written_at, tombstone = rows[0][:3]
    if tombstone is not None or (written_at is not None and limits.expired(float(written_at), now)):
        raise _evicted(session_id)
    return [_event(session_id, body, seq, at) for _, _, _, seq, at, body in rows if seq is not None]


def _event(session_id: str, body: Any, seq: Any, at: Any) -> SessionEvent:
    """The stored event: its body (a JSON object this module wrote) with the row's ``seq`` and ``at``.

    Parsed and validated in one call, the row's columns written after the body's own keys so that they win, as
    a later key does in JSON; about twice as fast as ``json.loads`` then validating the dict, which a record
    replayed whole (a one-shot hook process) does for every event of the session.
    """
    if not isinstance(body, str) or not body.startswith("{") or not body.endswith("}") or body == "{}":
        raise SessionError(f"session {session_id!r}: the stored event {seq!r} is not a JSON object")
    try:
        number, when = int(seq), float(at)
        if not math.isfinite(when):
            raise ValueError(when)
    except (TypeError, ValueError, OverflowError):
        raise SessionError(f"session {session_id!r}: the stored event {seq!r} has no valid number and time") from None
    return SessionEvent.model_validate_json(f'{body[:-1]},"seq":{number},"at":{when!r}}}')


def event_body(event: SessionEvent) -> str:
    """The ``body`` column of ``event``: its fields but the number and the time, as ASCII JSON."""
    fields = event.model_dump(include=set(_BODY_FIELDS))
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":"))


def _state(conn: Any, dialect: Dialect, session_id: str) -> _State:
    last_seq, written_at, tombstone = conn.execute(dialect.sql(_STATE), (session_id,)).fetchone()
    return _State(
        last_seq=None if last_seq is None else int(last_seq),
        written_at=None if written_at is None else float(written_at),
        tombstoned=tombstone is not None,
    )


def _sweep(conn: Any, dialect: Dialect, limits: SessionLimits, keep: str, now: float) -> None:
    """After a new session: evict sessions past retention, then the least recently written past ``max_sessions``."""
    cutoff = now - limits.retention_s
    stale = conn.execute(
        dialect.sql("SELECT session_id FROM sessions WHERE written_at < ? ORDER BY written_at LIMIT ?"),
        (cutoff, SWEEP),
    ).fetchall()
    _evict(conn, dialect, limits, [row[0] for row in stale], now, written_before=cutoff)
    if limits.max_sessions is None:
        return
    (count,) = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    over = int(count) - limits.max_sessions
    if over > 0:
        oldest = conn.execute(
            dialect.sql("SELECT session_id FROM sessions WHERE session_id <> ? ORDER BY written_at LIMIT ?"),
            (keep, min(over, SWEEP)),
        ).fetchall()
        _evict(conn, dialect, limits, [row[0] for row in oldest], now)


def _evict(
    conn: Any,
    dialect: Dialect,
    limits: SessionLimits,
    session_ids: list[str],
    now: float,
    *,
    written_before: float | None = None,
) -> None:
    """Evict the sessions whose lock can be had (and, with ``written_before``, still that old)."""
    gone: list[str] = []
    sql = "DELETE FROM sessions WHERE session_id = ?" + (" AND written_at < ?" if written_before is not None else "")
    for session_id in session_ids:
        if not _try_lock(conn, dialect, session_id):
            continue  # being written right now: not idle, and not ours to wait for
        params = (session_id,) if written_before is None else (session_id, written_before)
        if _deleted(conn, dialect, sql, params):  # not deleted: written since it was picked
            gone.append(session_id)
    if not gone:
        return
    cursor = conn.cursor()
    cursor.executemany(dialect.sql("DELETE FROM session_events WHERE session_id = ?"), [(s,) for s in gone])
    cursor.executemany(
        dialect.sql(
            "INSERT INTO session_tombstones (session_id, evicted_at) VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING"
        ),
        [(s, now) for s in gone],
    )
    (count,) = conn.execute("SELECT COUNT(*) FROM session_tombstones").fetchone()
    if int(count) > limits.tombstones:
        conn.execute(
            dialect.sql(
                "DELETE FROM session_tombstones WHERE session_id IN "
                "(SELECT session_id FROM session_tombstones ORDER BY evicted_at LIMIT ?)"
            ),
            (int(count) - limits.tombstones,),
        )


def _deleted(conn: Any, dialect: Dialect, sql: str, params: tuple[Any, ...]) -> bool:
    if dialect.returning:
        return conn.execute(dialect.sql(sql + " RETURNING 1"), params).fetchone() is not None
    return bool(conn.execute(dialect.sql(sql), params).rowcount == 1)


def _try_lock(conn: Any, dialect: Dialect, session_id: str) -> bool:
    if dialect.try_lock is None:
        return True  # the transaction already holds every lock (SQLite)
    return bool(conn.execute(dialect.sql(dialect.try_lock), (session_id,)).fetchone()[0])
