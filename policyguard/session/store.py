"""Where session records live: the store protocol and the in-memory default.

A :class:`SessionStore` appends events to a session and lists them after a
sequence number. It is bounded (documented in the README, "Sessions"):

* ``max_events`` per session: an append that would pass it raises
  :class:`SessionFull`; the record is never cut, since a rule that needs
  history would then read a shortened one;
* ``retention_s``: a session not written for that long is evicted;
* ``max_sessions``: past it, the least recently written session is evicted.

An evicted session leaves a tombstone, so asking for it again raises
:class:`SessionEvicted` instead of starting an empty record that would forget
the writes it held. Tombstones are bounded too (``max_tombstones``, oldest
dropped first); a session id older than every kept tombstone reads as new,
which the README states.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from ..errors import ConfigError, PolicyGuardError
from .events import NewEvent, SessionEvent, numbered

DEFAULT_MAX_EVENTS = 20_000
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_MAX_SESSIONS = 10_000
MAX_SESSION_ID = 200


class SessionError(PolicyGuardError):
    """A session record cannot be used as asked."""


class SessionEvicted(SessionError):
    """The store no longer has this session's record (retention or size limits)."""


class SessionFull(SessionError):
    """The session's record reached its event limit."""


class SessionStore(Protocol):
    """Append-only session records shared by every guard (and replica) that uses the store."""

    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        """Append ``events`` in order, atomically; returns them numbered. Raises :class:`SessionEvicted`
        or :class:`SessionFull` (and appends nothing)."""
        ...

    def session_events(self, session_id: str, after: int = 0) -> list[SessionEvent]:
        """The session's events with ``seq > after``, in order ([] for a session never written).
        Raises :class:`SessionEvicted` for a session the store evicted."""
        ...


def check_session_id(session_id: object) -> str:
    """``session_id`` when it is a usable id: a non-empty printable string of at most 200 characters."""
    if not isinstance(session_id, str) or not session_id or not session_id.isprintable():
        raise ConfigError(f"a session id must be a non-empty printable string, got {session_id!r:.80}")
    if len(session_id) > MAX_SESSION_ID:
        raise ConfigError(f"a session id has at most {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


class _Record:
    __slots__ = ("events", "written")

    def __init__(self, now: float) -> None:
        self.events: list[SessionEvent] = []
        self.written = now


class MemorySessionStore:
    """Session records in this process's memory: the default, shared by one process's guards only."""

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        retention_s: float = DEFAULT_RETENTION_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_tombstones: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_events < 1 or max_sessions < 1 or not retention_s > 0:
            raise ConfigError("max_events and max_sessions must be >= 1 and retention_s positive")
        self.max_events = max_events
        self.retention_s = float(retention_s)
        self.max_sessions = max_sessions
        self.max_tombstones = max_tombstones if max_tombstones is not None else 10 * max_sessions
        self._clock = clock
        self._records: OrderedDict[str, _Record] = OrderedDict()  # least recently written first
        self._tombstones: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        check_session_id(session_id)
        now = self._clock()
        with self._lock:
            self._expire(now)
            if session_id in self._tombstones:
                raise SessionEvicted(f"session {session_id!r} was evicted")
            record = self._records.get(session_id)
            if record is not None and len(record.events) + len(events) > self.max_events:
                raise SessionFull(f"session {session_id!r} has {len(record.events)} events (limit {self.max_events})")
            if record is None and len(events) > self.max_events:
                raise SessionFull(f"session {session_id!r} would have {len(events)} events (limit {self.max_events})")
            added = numbered(list(events), len(record.events) if record is not None else 0, now)
            if record is None:
                record = self._records[session_id] = _Record(now)
                while len(self._records) > self.max_sessions:
                    self._evict(next(iter(self._records)), now)
            record.events.extend(added)
            record.written = now
            self._records.move_to_end(session_id)
            return added

    def session_events(self, session_id: str, after: int = 0) -> list[SessionEvent]:
        check_session_id(session_id)
        with self._lock:
            self._expire(self._clock())
            if session_id in self._tombstones:
                raise SessionEvicted(f"session {session_id!r} was evicted")
            record = self._records.get(session_id)
            if record is None:
                return []
            return record.events[max(after, 0) :]

    def _expire(self, now: float) -> None:
        while self._records:
            oldest, record = next(iter(self._records.items()))
            if now - record.written <= self.retention_s:
                break
            self._evict(oldest, now)

    def _evict(self, session_id: str, now: float) -> None:
        del self._records[session_id]
        self._tombstones[session_id] = now
        while len(self._tombstones) > self.max_tombstones:
            self._tombstones.popitem(last=False)
