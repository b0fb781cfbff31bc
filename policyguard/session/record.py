"""The guard's own record of one conversation.

The host's history can be cancelled, timed out, summarised, trimmed or shared;
the record cannot. Every call the guard judged is in it with its decision, and
every allowed call with its fate as the guard learns it: answered (a result,
maybe an error) or **unknown** (cancelled, timed out, the process died).
What the host's history shows is merged in: a result the record lacks is
added, nothing the record has is ever removed or changed. The gate reads the
record (:meth:`Session.view`), so:

* a write the host forgot still counts for every rule that limits repetition;
* an allowed write with no result (unknown fate, or still running) counts as
  done for those rules and is never a fact: a record it would change has to be
  read again after it, and that later read is the fact (which is what lets an
  honest retry after a timeout through);
* a blocked call never happened: it is kept for the audit, not shown to rules;
* the host's history never un-counts an allowed call: an error result it shows
  for one is not taken (a proxy that timed out writes an error there while the
  tool may have run; ids, tools and arguments can all repeat, so it may be
  another call's), and neither is any result once the fate is unknown. The
  integration that ran the call reports a failure with
  :meth:`Session.record_result`.

Order is the order the guard learned things in: a call it judged takes its
place when judged (writes of a session are serialized, so that is the order
they ran in), and a call the host ran without asking (a read) takes its place
when its result is seen. A host call with no result and no decision is not in
the record yet: it has not run as far as the guard knows.

Results are paired as they arrive (a result answers the newest unanswered call
with its id), so a check costs the same at message 2,000 as at message 50: only
messages the record has not seen are read, found after the host's last message
the record ingested (by position, or by looking for it when the history was
rewritten).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from policyguard.trajectory.messages import CallSite, DuplicateCallId, Message, ToolCall, ToolResult, Trajectory

from .events import Judged, NewEvent, SessionEvent
from .store import SessionEvicted, SessionStore, check_session_id

_WORD = re.compile(r"[\w.@-]+")
_TAIL = 3  # host messages that must match to take up the history where the last observe stopped


@dataclass
class _Site:
    call: ToolCall
    seq: int
    judged: Judged
    result: ToolResult | None = None
    unknown: str | None = None  # why the fate is unknown
    visible: int = -1  # its place in the gate's view (-1: blocked, not shown)


@dataclass
class _HostState:
    """Where the host's history stood at the last observe (this process only)."""

    count: int = 0
    tail: list[Message] = field(default_factory=list)  # the last messages ingested (up to _TAIL), oldest first
    # unanswered host call id -> its record site (from the check that deferred it), ("recorded", site) when
    # matched by tool and arguments, or the call itself when the record does not have it yet
    open: dict[str, int | tuple[str, int] | ToolCall] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)  # host call ids answered (a second answer is ambiguous)
    matched: set[int] = field(default_factory=set)  # judged record sites a host call stands for


class RecordView:
    """A snapshot of the record for the gate: its calls in order, each with its result, and the user's words.

    The call being checked is never in it (the record adds it with its
    decision), and the record already refused an ambiguous pairing, so the
    gate skips both scans it makes on a plain trajectory.
    """

    paired = True
    excludes_pending = True

    def __init__(self, sites: list[CallSite], said: dict[str, int], successes: dict[str, list[ToolResult]]) -> None:
        self._sites = sites
        self._said = said
        self._successes = successes
        self.messages: list[Message] | None = None

    def call_sites(self) -> list[CallSite]:
        return self._sites

    def tool_results(self) -> Iterator[ToolResult]:
        return iter([site.result for site in self._sites if site.result is not None])

    def successes_by_tool(self) -> dict[str, list[ToolResult]]:
        """Successful results by tool (what a prerequisite read needs)."""
        return self._successes

    def duplicate_call_id(self) -> DuplicateCallId | None:
        return None  # the record pairs as it goes: an ambiguous host history is refused when it is observed

    def said_words(self) -> dict[str, int]:
        return self._said


class Session:
    """One conversation's append-only record, kept by the guard in ``store``.

    Made by :meth:`policyguard.Guard.session`; thread-safe. ``is_mutating``
    tells which tools are writes (the guard's checklist).
    """

    def __init__(
        self,
        session_id: str,
        store: SessionStore,
        *,
        is_mutating: Callable[[str], bool] = lambda name: True,
    ) -> None:
        self.id = check_session_id(session_id)
        self.store = store
        self._is_mutating = is_mutating
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._seq = 0
        self._sites: list[_Site] = []
        self._site_at: dict[int, int] = {}  # call event seq -> index in _sites
        self._open: dict[str, int] = {}  # call id -> its newest unanswered site
        self._by_id: dict[str, list[int]] = {}  # call id -> its sites, in order
        self._said: dict[str, int] = {}
        self._visible: list[CallSite] = []  # what the gate reads: calls not blocked, kept as results arrive
        self._successes: dict[str, list[ToolResult]] = {}
        self._running_writes: set[int] = set()  # allowed writes with no result and no unknown fate
        self._turn: object | None = None  # the write check judging now (see claim_writes)
        self._waiting: set[object] = set()  # checks waiting in claim_writes
        self._abandoned: set[object] = set()  # waiting checks released before their turn came
        self._host = _HostState()
        self._deferred: set[str] = set()  # pending calls whose host copy judge() will map (checks in flight)
        self.evicted: str | None = None

    # -- what the guard asks ------------------------------------------------

    def sync(self) -> None:
        """Apply events other guards (or replicas) appended since this object last looked."""
        with self._lock:
            try:
                events = self.store.session_events(self.id, after=self._seq)
            except SessionEvicted as exc:
                self.evicted = str(exc)
                raise
            for event in events:
                self._apply(event)

    def observe(self, trajectory: Trajectory, pending: ToolCall | None = None) -> None:
        """Merge what the host's history adds (results, with their calls; user messages) into the record.

        ``pending`` is the call being checked: :meth:`judge` records it with its
        decision, and its copy in the history then stands for that record.
        Raises :class:`~policyguard.trajectory.messages.DuplicateCallId` (and records
        nothing) when the new part of the history pairs ambiguously.
        """
        with self._lock:
            messages = trajectory.messages
            start = self._host_start(messages)
            host = self._host
            batch = _Batch(self, dict(host.open), set(host.answered), set(host.matched))
            for index in range(start, len(messages)):
                batch.take(messages[index])
            if batch.events:
                self._append(batch.resolved())
            if messages:
                self._host = _HostState(
                    count=len(messages),
                    tail=list(messages[-_TAIL:]),
                    open=batch.host_open,
                    answered=batch.host_answered,
                    matched=batch.matched,
                )
            if pending is not None and self._host_copy(pending):
                self._deferred.add(pending.id)

    def judge(self, call: ToolCall, judged: Judged) -> None:
        """Record the guard's decision on ``call`` (``allow`` or ``block``)."""
        with self._lock:
            event = NewEvent(kind="call", call_id=call.id, tool=call.name, arguments=call.arguments, judged=judged)
            (added,) = self._append([event])
            if call.id in self._deferred:
                self._deferred.discard(call.id)
                if self._host_copy(call):  # the host's copy of the call is this site: its result answers it
                    at = self._site_at[added.seq]
                    self._host.open[call.id] = at
                    self._host.matched.add(at)

    def record_result(self, call_id: str, content: str, *, is_error: bool = False) -> bool:
        """The fate of the newest unanswered call ``call_id``: executed, with this result (an error result:
        the tool refused or failed). False when no call of that id is waiting for one."""
        with self._lock:
            at = self._open.get(call_id)
            if at is None:
                return False
            site = self._sites[at]
            self._append(
                [NewEvent(kind="result", call_id=call_id, answers=site.seq, content=content, is_error=is_error)]
            )
            return True  # the host's copy of the result, when it comes, finds the call answered and is skipped

    def record_unknown(self, call_id: str, why: str) -> bool:
        """The newest unanswered call ``call_id`` may or may not have run (``why``: cancelled, timed out...)."""
        with self._lock:
            at = self._open.get(call_id)
            if at is None or self._sites[at].unknown is not None:
                return False
            self._append([NewEvent(kind="unknown", call_id=call_id, answers=self._sites[at].seq, content=why)])
            return True

    def view(self) -> RecordView:
        """The record as the gate reads it: calls not blocked, in order, with their results."""
        with self._lock:
            successes = {tool: list(results) for tool, results in self._successes.items()}
            return RecordView(list(self._visible), dict(self._said), successes)

    def unsettled(self) -> list[tuple[str, str]]:
        """Allowed writes with no result: ``(tool, why)`` for each (why: the unknown's reason, or still running)."""
        with self._lock:
            return [
                (site.call.name, site.unknown or "no result yet")
                for site in self._sites
                if site.judged == "allow" and site.result is None and self._is_mutating(site.call.name)
            ]

    def claim_writes(self, turn: object, timeout: float) -> bool:
        """Take the session's write turn for one check (``turn``, any object) until :meth:`release_writes`.

        Waits until no other check holds the turn and no allowed write is still
        running, so a write is judged with every earlier write of the session
        in the record. False when another check still holds the turn after
        ``timeout`` seconds (the write must not be judged without it) or the
        turn was released while waiting (its check was cancelled). A write
        still running after ``timeout`` no longer delays the turn: it counts as
        unknown for this check.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            self._waiting.add(turn)
            try:
                while turn not in self._abandoned and (self._turn is not None or self._running_writes):
                    left = deadline - time.monotonic()
                    if left <= 0 and self._turn is None:
                        break
                    if left <= 0:
                        return False
                    self._changed.wait(left)
                if turn in self._abandoned:
                    return False
                self._turn = turn
                return True
            finally:
                self._waiting.discard(turn)
                self._abandoned.discard(turn)

    def release_writes(self, turn: object) -> None:
        """End ``turn``'s hold on the write turn; a check still waiting for it gives up. Idempotent."""
        with self._changed:
            if self._turn is turn:
                self._turn = None
                self._changed.notify_all()
            elif turn in self._waiting:
                self._abandoned.add(turn)
                self._changed.notify_all()

    def id_problem(self, call: ToolCall) -> str | None:
        """Why ``call``'s id cannot name a new call in this session, or None."""
        with self._lock:
            if call.id not in self._deferred and self._answered_in_host(call):
                return "was already answered by a tool result"
            at = self._open.get(call.id)
            if at is None:
                return None
            site = self._sites[at]
            if (site.call.name, site.call.arguments) != (call.name, call.arguments):
                return "is used by another call in this session that is not answered"
            if site.judged == "allow":
                return "was allowed already in this session and its outcome is not known yet"
            return None

    # -- internals ------------------------------------------------------------

    def _host_copy(self, call: ToolCall) -> bool:
        """The host's history shows ``call`` unanswered, and the record has not placed it yet."""
        waiting = self._host.open.get(call.id)
        return isinstance(waiting, ToolCall) and (waiting.name, waiting.arguments) == (call.name, call.arguments)

    def _answered_in_host(self, call: ToolCall) -> bool:
        """The host's history shows this very call answered (it ran): checking it again cannot run it again."""
        if call.id not in self._host.answered:
            return False
        sites = self._by_id.get(call.id)
        if not sites:
            return False
        site = self._sites[sites[-1]]  # the newest call of that id
        return (site.call.name, site.call.arguments) == (call.name, call.arguments) and site.result is not None

    def _is_pending(self, site: _Site) -> bool:
        """An allowed write of this session still running: no result, not declared unknown."""
        return (
            site.judged == "allow"
            and site.result is None
            and site.unknown is None
            and self._is_mutating(site.call.name)
        )

    def _host_start(self, messages: list[Message]) -> int:
        """The first host message the record has not ingested.

        The history goes on from where the last observe stopped when its last
        messages are still there: at the same place (a loop that appends), or
        elsewhere (a summary replaced what came before). They are looked for by
        identity first, then by value; several messages must match, so a
        repeated message (ids reused, same result) is not taken for the place.
        """
        tail = self._host.tail
        if not tail:
            return 0
        count = self._host.count
        if len(messages) >= count:  # a loop that appended: the tail is where it was
            where = messages[count - len(tail) : count]
            if _identical(where, tail) or _equal(where, tail):
                return count
        for same in (_identical, _equal):
            for end in range(len(messages), len(tail) - 1, -1):  # newest place first
                if same(messages[end - len(tail) : end], tail):
                    return end
        # nothing we saw is left: read it all; a judged call it shows stands for its record, the rest is added
        self._host = _HostState()
        return 0

    def _append(self, events: list[NewEvent]) -> list[SessionEvent]:
        """Append to the store, then apply everything up to and including these events (other replicas' too)."""
        try:
            added = self.store.append_events(self.id, events)
        except SessionEvicted as exc:
            self.evicted = str(exc)
            raise
        self.sync()
        self._changed.notify_all()
        return added

    def _apply(self, event: SessionEvent) -> None:
        self._seq = event.seq
        if event.kind == "call":
            at = len(self._sites)
            call = ToolCall(id=event.call_id, name=event.tool, arguments=event.arguments)
            site = _Site(call, event.seq, event.judged)
            if event.judged != "block":
                site.visible = len(self._visible)
                self._visible.append(CallSite(call, (event.seq, 0), None))
            self._sites.append(site)
            if self._is_pending(site):
                self._running_writes.add(at)
            self._site_at[event.seq] = at
            self._open[event.call_id] = at
            self._by_id.setdefault(event.call_id, []).append(at)
        elif event.kind in ("result", "unknown"):
            answered = self._site_at.get(event.answers)
            if answered is None:
                return
            at = answered
            site = self._sites[at]
            if site.result is not None:
                return
            self._running_writes.discard(at)
            if event.kind == "unknown":
                site.unknown = event.content or "unknown"
                return
            site.result = ToolResult(
                call=site.call, content=event.content, is_error=event.is_error, index=event.seq, order=(site.seq, 0)
            )
            site.unknown = None
            if site.visible >= 0:
                self._visible[site.visible] = CallSite(site.call, (site.seq, 0), site.result)
                if not event.is_error:
                    self._successes.setdefault(site.call.name, []).append(site.result)
            if self._open.get(site.call.id) == at:
                del self._open[site.call.id]
        elif event.kind == "user":
            for word in _WORD.findall(event.content):
                self._said.setdefault(word.rstrip("."), event.seq)


class _Batch:
    """The events one observe adds, computed before anything is appended (an ambiguity appends nothing)."""

    def __init__(self, session: Session, host_open: dict[str, Any], answered: set[str], matched: set[int]) -> None:
        self.session = session
        self.host_open: dict[str, Any] = host_open
        self.host_answered = answered
        self.matched = matched
        self.events: list[dict[str, Any]] = []  # NewEvent fields; 'answers' may be ("new", k): the batch's k-th event

    def take(self, message: Message) -> None:
        if message.role == "user" and message.content:
            self.events.append({"kind": "user", "content": message.content})
        elif message.role == "assistant":
            ids = [call.id for call in message.tool_calls]
            for call in message.tool_calls:
                if ids.count(call.id) > 1:
                    raise DuplicateCallId(call.id, "is used twice in one message")
                if call.id in self.host_open:
                    raise DuplicateCallId(call.id, "is used by two calls before the first is answered")
                self.host_answered.discard(call.id)
                recorded = self._recorded_site(call)
                self.host_open[call.id] = ("recorded", recorded) if recorded is not None else call
        elif message.role == "tool" and message.tool_call_id is not None:
            self._answer(message)

    def _recorded_site(self, call: ToolCall) -> int | None:
        """The record site this host call stands for, if the record has it: the oldest not yet matched with
        the same id, tool and arguments (not a blocked one).

        A session object that did not ingest the history itself (another
        replica, or one rebuilt from the store) reads it from the start: its
        calls are matched to the record instead of added twice. Matching by id,
        tool and arguments can take a new call for an old one that reused all
        three; its result is then not taken (the old one has its own) and an
        allowed call stays counted, which errs towards blocking.
        """
        session = self.session
        for at in session._by_id.get(call.id, ()):
            site = session._sites[at]
            if at in self.matched or site.judged == "block":
                continue
            if (site.call.name, site.call.arguments) == (call.name, call.arguments):
                self.matched.add(at)
                return at
        return None

    def _answer(self, message: Message) -> None:
        call_id = message.tool_call_id
        assert call_id is not None
        target = self.host_open.pop(call_id, None)
        if target is None:
            if call_id in self.host_answered:
                raise DuplicateCallId(call_id, "has two results")
            return  # answers no call the host showed: not trusted
        self.host_answered.add(call_id)
        answers: Any
        if isinstance(target, tuple):
            target = target[1]
        if isinstance(target, int):
            site = self.session._sites[target]
            if site.result is not None or site.unknown is not None:
                return  # the record has its answer, or knows nobody can tell: the host's history cannot change it
            if message.is_error and site.judged == "allow":
                # A failure the host's history claims for an allowed call is not taken: ids, tools and arguments
                # can all repeat, so it may be another call's error, and taking it would un-count a write that
                # may have run. The integration that ran the call reports failures (record_result).
                return
            answers = self.session._sites[target].seq
        else:  # a call the host ran without asking: it enters the record with its result
            self.events.append(
                {"kind": "call", "call_id": target.id, "tool": target.name, "arguments": target.arguments}
            )
            answers = ("new", len(self.events) - 1)
        self.events.append(
            {
                "kind": "result",
                "call_id": call_id,
                "answers": answers,
                "content": message.content or "",
                "is_error": message.is_error,
            }
        )

    def resolved(self) -> list[NewEvent]:
        """The events, with a reference to a call of this batch as a negative ``answers`` (that many back)."""
        out: list[NewEvent] = []
        for fields in self.events:
            answers = fields.get("answers")
            if isinstance(answers, tuple):
                fields = {**fields, "answers": answers[1] - len(out)}
            out.append(NewEvent(**fields))
        return out


def _identical(found: list[Message], tail: list[Message]) -> bool:
    return len(found) == len(tail) and all(a is b for a, b in zip(found, tail, strict=True))


def _equal(found: list[Message], tail: list[Message]) -> bool:
    return len(found) == len(tail) and all(a is b or a == b for a, b in zip(found, tail, strict=True))
