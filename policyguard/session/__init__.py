"""Sessions: the guard's own append-only record of each conversation (see :mod:`.record`)."""

from .events import NewEvent, SessionEvent
from .record import RecordView, Session
from .store import MemorySessionStore, SessionError, SessionEvicted, SessionFull, SessionStore

__all__ = [
    "MemorySessionStore",
    "NewEvent",
    "RecordView",
    "Session",
    "SessionError",
    "SessionEvent",
    "SessionEvicted",
    "SessionFull",
    "SessionStore",
]
