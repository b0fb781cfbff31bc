"""Sessions: the guard's own append-only record of each conversation (see :mod:`.record`).

:mod:`.record` is one conversation's record (what was submitted, allowed,
executed and read), :mod:`.store` the bounded in-memory store, :mod:`.sql`
the tables the SQLite and PostgreSQL stores keep it in.

May use: :mod:`policyguard.trajectory` and :mod:`policyguard.errors`.
"""

from .events import NewEvent, SessionEvent
from .record import RecordView, Session
from .store import MemorySessionStore, SessionError, SessionEvicted, SessionFull, SessionHold, SessionStore

__all__ = [
    "MemorySessionStore",
    "NewEvent",
    "RecordView",
    "Session",
    "SessionError",
    "SessionEvent",
    "SessionEvicted",
    "SessionFull",
    "SessionHold",
    "SessionStore",
]
