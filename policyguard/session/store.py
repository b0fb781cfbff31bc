"""Where session records live: the store protocol and the in-memory default.

A :class:`SessionStore` appends events to a session and lists them after a
sequence number. It is bounded (documented in the README, "Sessions"):

* ``max_events`` per session: an append that would pass it raises
  :class:`SessionFull`; the record is never cut, since a rule that needs
  history would then read a shortened one;
* ``retention_s``: a session not written for that long is evicted;
* ``max_sessions``: past it, the least recently written session is evicted.

The limits are one :class:`SessionLimits` value, read the same way by every
store (this in-memory one and the SQL tables of :mod:`.sql`).

An evicted session leaves a tombstone, so asking for it again raises
:class:`SessionEvicted` instead of starting an empty record that would forget
the writes it held. Tombstones are bounded too (``max_tombstones``, oldest
dropped first); a session id older than every kept tombstone reads as new,
which the README states.

A store also serializes one session's decisions (:meth:`SessionStore.hold`):
two calls of one conversation judged at the same moment, in two threads or two
replicas sharing the store, are judged one after the other, as one process
would judge them. How each store does it: :mod:`.holds` (this process, a SQLite
file) and :mod:`policyguard.enforcement.pgholds` (PostgreSQL).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policyguard.errors import ConfigError, PolicyGuardError

from .events import NewEvent, SessionEvent, numbered
from .holds import LocalHolds

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


@runtime_checkable
class SessionHold(Protocol):
    """One session's decision lock, held until :meth:`release`."""

    def release(self) -> None:
        """Give the lock back. Idempotent; never raises (a lock that cannot be given back is dropped
        with its connection or its process)."""
        ...


@runtime_checkable
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

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        """Wait until the caller alone holds the session's decision lock, among every thread and process
        using this store's storage; None when it stayed taken for ``timeout`` seconds (0: try once).

        Other sessions are not blocked; the holder's death releases it. Not re-entrant: a second hold
        of a session by its holder waits like any other. A storage failure raises, as the other methods do.
        """
        ...


def check_session_id(session_id: object) -> str:
    """``session_id`` when it is a usable id: a non-empty printable string of at most 200 characters."""
    if not isinstance(session_id, str) or not session_id or not session_id.isprintable():
        raise ConfigError(f"a session id must be a non-empty printable string, got {session_id!r:.80}")
    if len(session_id) > MAX_SESSION_ID:
        raise ConfigError(f"a session id has at most {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


class SessionLimits(BaseModel):
    """How much a session store keeps; the same rules for every store.

    ``max_sessions`` None (the SQL stores' default) bounds sessions by
    retention only. ``max_tombstones`` None keeps ten per session allowed
    (100,000 without ``max_sessions``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_events: int = Field(DEFAULT_MAX_EVENTS, ge=1)
    retention_s: float = Field(DEFAULT_RETENTION_S, gt=0, allow_inf_nan=False)
    max_sessions: int | None = Field(DEFAULT_MAX_SESSIONS, ge=1)
    max_tombstones: int | None = Field(None, ge=1)

    @property
    def tombstones(self) -> int:
        """How many evicted session ids are remembered (the oldest are forgotten first)."""
        if self.max_tombstones is not None:
            return self.max_tombstones
        return 10 * (self.max_sessions if self.max_sessions is not None else DEFAULT_MAX_SESSIONS)

    def expired(self, written: float, now: float) -> bool:
        """Whether a session last written at ``written`` is past retention at ``now``."""
        return written < now - self.retention_s

    def room(self, session_id: str, have: int, adding: int) -> SessionFull | None:
        """The error an append of ``adding`` events to a session of ``have`` events is, or None when it fits."""
        if have + adding <= self.max_events:
            return None
        return SessionFull(f"session {session_id!r} has {have} events; {adding} more would pass {self.max_events}")


def session_limits(**values: object) -> SessionLimits:
    """:class:`SessionLimits` from a store's keyword arguments; a bad value is a :class:`ConfigError`."""
    try:
        return SessionLimits.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"session limits: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


class Released:
    """A :class:`SessionHold` that runs ``give_back`` on its first :meth:`release` (any thread), never again."""

    __slots__ = ("_give_back", "_mutex")

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back: Callable[[], None] | None = give_back
        self._mutex = threading.Lock()

    def release(self) -> None:
        with self._mutex:
            give_back, self._give_back = self._give_back, None
        if give_back is not None:
            try:
                give_back()
            except Exception:  # noqa: BLE001 - a release never raises: the caller already decided
                pass


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
        self.limits = session_limits(
            max_events=max_events, retention_s=retention_s, max_sessions=max_sessions, max_tombstones=max_tombstones
        )
        self.max_events = max_events
        self.retention_s = float(retention_s)
        self.max_sessions = max_sessions
        self.max_tombstones = self.limits.tombstones
        self._clock = clock
        self._records: OrderedDict[str, _Record] = OrderedDict()  # least recently written first
        self._tombstones: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._holds: LocalHolds[str] = LocalHolds()

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        """The session's decision lock among this process's threads (the memory store has no other process)."""
        check_session_id(session_id)
        if not self._holds.acquire(session_id, timeout):
            return None
        return Released(lambda: self._holds.release(session_id))

    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        check_session_id(session_id)
        now = self._clock()
        with self._lock:
            self._expire(now)
            if session_id in self._tombstones:
                raise SessionEvicted(f"session {session_id!r} was evicted")
            record = self._records.get(session_id)
            have = len(record.events) if record is not None else 0
            full = self.limits.room(session_id, have, len(events))
            if full is not None:
                raise full
            added = numbered(list(events), have, now)
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
            if not self.limits.expired(record.written, now):
                break
            self._evict(oldest, now)

    def _evict(self, session_id: str, now: float) -> None:
        del self._records[session_id]
        self._tombstones[session_id] = now
        while len(self._tombstones) > self.max_tombstones:
            self._tombstones.popitem(last=False)
