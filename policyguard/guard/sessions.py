"""The bridge between the guard and its session records (:mod:`policyguard.session`).

Before a check, the host's dialogue is merged into the session's record and
the call judged on the record's view (:meth:`SessionBridge.from_record`);
after it, the decision is written to the record (:meth:`SessionBridge.into_record`).
A record that cannot be read or written vouches for nothing: a write is then
blocked, a read still passes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from policyguard.decision import Decision
from policyguard.trajectory.messages import DuplicateCallId, ToolCall, Trajectory

from .calls import plain_name
from .remediation import NO_VERIFIER_MESSAGE, SESSION_BUSY_MESSAGE
from .settings import GuardSettings

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.session import Session, SessionStore

_SESSION_OBJECTS = 4096
_READ_WAIT_S = 0.2  # how long a read waits for its session before it passes unrecorded (a write may hold it)


class SessionBridge:
    """The guard's session store and the session objects it keeps in memory (the newest 4,096)."""

    def __init__(self, settings: GuardSettings, store: SessionStore | None) -> None:
        self.settings = settings
        self._store = store
        self._objects: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            from policyguard.session import MemorySessionStore

            self._store = MemorySessionStore()
        return self._store

    def session(self, session_id: str | None) -> Session:
        """See :meth:`policyguard.guard.core.Guard.session`."""
        from policyguard.session import Session

        if session_id is None:
            import uuid

            session_id = uuid.uuid4().hex
        with self._lock:
            found = self._objects.get(session_id)
            if found is None:
                found = Session(session_id, self.store, is_mutating=self.mutating)
                self._objects[session_id] = found
                while len(self._objects) > _SESSION_OBJECTS:
                    self._objects.popitem(last=False)
            else:
                self._objects.move_to_end(session_id)
            return found

    def as_session(self, session: Session | str | None) -> Session | None:
        if session is None:
            return None
        if isinstance(session, str):
            return self.session(session)
        from policyguard.session import Session

        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session or a session id string, got {type(session).__name__}")
        return session

    def mutating(self, name: str) -> bool:
        """Whether a call of tool ``name`` is a write: all but the tools the checklist declares read-only."""
        checklist = self.settings.checklist
        return checklist.is_mutating(name) or not plain_name(name) or checklist.tool_spec(name) is None

    def from_record(
        self, call: ToolCall, trajectory: Trajectory, record: Session, ids: dict[str, Any], turn: object
    ) -> tuple[Decision | None, Any]:
        """Merge ``trajectory`` into the session's record: ``(None, the record's view)`` to go on, or
        ``(decision, None)`` when the record alone decides (a read passes whatever the record's state).

        The check first takes the session (``turn``, :meth:`Session.claim`): the checks of one session are
        judged one at a time, in this process and across replicas sharing the store, each with the fate of
        the earlier writes in the record. A read that cannot have it in time passes unrecorded."""
        from policyguard.session import SessionError

        mutating = self.mutating(call.name)
        wait_s = self.settings.session_wait_s if mutating else min(self.settings.session_wait_s, _READ_WAIT_S)
        try:
            claimed = record.claim(turn, wait_s, write=mutating, pending=call, fates_timeout=self._result_wait())
        except Exception as exc:  # a store that cannot lock or read the session vouches for nothing
            if not mutating:
                return Decision.allow("read_only", **ids), None
            message = _session_message(exc) if isinstance(exc, SessionError) else NO_VERIFIER_MESSAGE
            return Decision.block("guard", message, error=f"session store: {type(exc).__name__}: {exc}", **ids), None
        if not claimed:
            if not mutating:
                return Decision.allow("read_only", **ids), None
            return Decision.block(
                "guard", SESSION_BUSY_MESSAGE, error="another check of this session was still being judged", **ids
            ), None
        try:
            if not mutating:  # a write's claim brought the record up to date already, holding the session
                record.sync()
            record.observe(trajectory, pending=call)
        except SessionError as exc:
            if not mutating:
                return Decision.allow("read_only", **ids), None
            return Decision.block("guard", _session_message(exc), error=f"session: {exc}", **ids), None
        except DuplicateCallId as exc:
            if not mutating:
                return Decision.allow("read_only", **ids), None
            return Decision.block(
                "bad_call",
                f"The dialogue is ambiguous ({exc}), so no fact in it can be trusted and this call was not "
                "performed. Tool call ids must be unique.",
                error=str(exc),
                **ids,
            ), None
        except Exception as exc:  # a session store that cannot be read vouches for nothing
            if not mutating:
                return Decision.allow("read_only", **ids), None
            return Decision.block(
                "guard", NO_VERIFIER_MESSAGE, error=f"session store: {type(exc).__name__}: {exc}", **ids
            ), None
        if not mutating:
            return None, record.view(call)
        record.await_earlier_reads(call, self._result_wait())
        problem = record.id_problem(call)
        if problem is not None:
            return Decision.block(
                "bad_call",
                f"The call id {call.id!r} {problem}, so this call was not performed. Check the current state with "
                "a read, then make the call again with a new id if it is still needed.",
                error=f"call id {problem}",
                **ids,
            ), None
        return None, record.view(call)

    def _result_wait(self) -> float:
        """How long a write waits for the results of earlier calls of its session."""
        wait = self.settings.session_result_wait_s
        return self.settings.session_wait_s if wait is None else min(wait, self.settings.session_wait_s)

    def into_record(
        self, call: ToolCall, decision: Decision, record: Session, ids: dict[str, Any], turn: object
    ) -> Decision:
        """Write the decision to the session's record; an allow the record cannot hold becomes a block.
        A read that passed without holding the session (:meth:`from_record`) is not recorded.

        A block says which earlier writes of the session have no known outcome,
        so the agent checks the state with a read before it retries.
        """
        from policyguard.session import SessionError

        if decision.stage == "read_only" and (record.evicted is not None or not record.holding(turn)):
            return decision  # a read passes; a record evicted, or not held, takes nothing
        allowed = decision.outcome == "allow"
        try:
            record.judge(call, "allow" if allowed else "block")
        except (SessionError, Exception) as exc:
            if not allowed or decision.stage == "read_only":
                return decision
            message = _session_message(exc) if isinstance(exc, SessionError) else NO_VERIFIER_MESSAGE
            return Decision.block("guard", message, error=f"session: {type(exc).__name__}: {exc}", **ids)
        if allowed or decision.awaiting_approval:
            return decision
        unsettled = record.unsettled()
        if not unsettled:
            return decision
        tools = ", ".join(sorted({tool for tool, _ in unsettled}))
        why = unsettled[-1][1]
        note = (
            f" The outcome of an earlier {tools} call in this conversation is not known ({why}): check the current "
            "state with a read before retrying anything it may already have done."
        )
        return decision.model_copy(update={"message": (decision.message or NO_VERIFIER_MESSAGE) + note})


def _session_message(exc: Exception) -> str:
    """The remediation for a write the session's record cannot take."""
    from policyguard.session import SessionEvicted, SessionFull

    if isinstance(exc, SessionEvicted):
        return (
            "The guard no longer keeps the record of this conversation (it passed the session retention or size "
            "limit), so no write can be checked against its history and this one was not performed. Start a new "
            "conversation, or transfer the user to a human agent."
        )
    if isinstance(exc, SessionFull):
        return (
            "This conversation is too long for the guard's record, so no further write can be checked against its "
            "history and this one was not performed. Start a new conversation, or transfer the user to a human agent."
        )
    return NO_VERIFIER_MESSAGE
