"""The guard's own record of one conversation.

The host's history can be cancelled, timed out, summarised, trimmed or shared;
the record cannot. Every call the host issued or the guard judged is in it, with
the guard's decision, and every allowed call with its fate as the guard learns
it: answered (a result, maybe an error) or **unknown** (cancelled, timed out,
the process died). What the host's history shows is merged in: a call or result
the record lacks is added, nothing the record has is ever removed or changed.
The gate reads the record (:meth:`Session.view`), so:

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

**Order is the order the host issued calls in**, never the order results came
back or calls were judged: every call has a *place*, the host's assistant
message that issued it (numbered in the session) and its position there
(:mod:`.hostmerge`). A call the guard judged before the host's history showed it
takes the next message number. A call issued but never answered nor judged is
in the record too, as the one-shot reader of the history counts it: a sibling of
the pending call checked at the same moment elsewhere is not forgotten. The
gate's view for a pending call holds the calls placed before it
(:meth:`Session.view`), exactly what reading the history once would hold, plus
what only the record remembers.

Results are paired as they arrive (a result answers the newest unanswered call
with its id), so a check costs the same at message 2,000 as at message 50: only
messages the record has not seen are read, found after the host's last message
the record ingested (by position, or by looking for it when the history was
rewritten).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from policyguard.trajectory.messages import CallSite, DuplicateCallId, ToolCall, ToolResult, Trajectory
from policyguard.trajectory.words import user_words

from .events import Judged, NewEvent, SessionEvent
from .hostmerge import TAIL, Batch, HostState, host_start
from .store import SessionEvicted, SessionStore, check_session_id


class _Site:
    __slots__ = ("call", "seq", "judged", "place", "result", "unknown", "direct")

    def __init__(self, call: ToolCall, seq: int, judged: Judged, place: tuple[int, int], *, direct: bool) -> None:
        self.call = call
        self.seq = seq
        self.judged = judged
        self.place = place  # (message number, position in it): where the host issued it
        self.result: ToolResult | None = None
        self.unknown: str | None = None  # why the fate is unknown
        self.direct = direct  # judged before the host's history showed it

    @property
    def key(self) -> tuple[int, int, int]:
        return (*self.place, self.seq)


class _NoHold:
    """The hold of a store that needs none (it is only this process's)."""

    def release(self) -> None:
        return None


_NO_HOLD = _NoHold()


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
        self.messages: list[Any] | None = None

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
        self.sites: list[_Site] = []
        self.site_at: dict[int, int] = {}  # call event seq -> index in sites
        self._order: list[int] = []  # indices of sites, by place (then by when the record learned them)
        self._open: dict[str, int] = {}  # call id -> its newest unanswered site
        self._by_id: dict[str, list[int]] = {}  # call id -> its sites, in order
        self._by_message: dict[int, list[int]] = {}  # message number -> its sites
        self._said: dict[str, int] = {}
        self._message = 0  # the newest message number in the record
        # The number of the calls judged before the host showed them, while nothing else came after them: calls
        # checked side by side with no result between may run concurrently, so they share one message number.
        self._direct_group: int | None = None
        self._direct_next = 0  # the next position in that group
        self._running_writes: set[int] = set()  # allowed writes with no result and no unknown fate
        self._turn: object | None = None  # the write check judging now (see claim_writes)
        self._waiting: set[object] = set()  # checks waiting in claim_writes
        self._abandoned: set[object] = set()  # waiting checks released before their turn came
        self._host = HostState()
        self._pending: dict[str, int] = {}  # pending call id -> the site of its host copy (checks in flight)
        self._holds: dict[object, Any] = {}  # check -> the store's hold on this session (see claim)
        self._claiming: set[object] = set()  # checks inside claim (waiting for the turn or the store's hold)
        self._released: set[object] = set()  # ... of those, the ones released meanwhile (cancelled)
        self.evicted: str | None = None
        # The view's settled prefix (see _extend_settled): the CallSites of the first `_cached` entries of `_order`
        # that the gate sees, `_marks[p]` = how many of them come before order entry p, and their successes.
        self._cached = 0
        self._cache: list[CallSite] = []
        self._marks: list[int] = []
        self._cache_successes: dict[str, tuple[list[int], list[ToolResult]]] = {}  # tool -> (cache indices, results)

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
        """Merge what the host's history adds (calls at the place they were issued, results, user messages).

        ``pending`` is the call being checked: when the history shows it issued
        and unanswered, that site is the one :meth:`judge` decides and
        :meth:`view` cuts at. Raises
        :class:`~policyguard.trajectory.messages.DuplicateCallId` (and records
        nothing) when the new part of the history pairs ambiguously.
        """
        with self._lock:
            messages = trajectory.messages
            start = host_start(self._host, messages)
            if start is None:  # nothing we saw is left: read it all; calls the record has are matched, not added
                self._host, start = HostState(), 0
            batch = Batch(self, self._host, self._message, self._said)
            for index in range(start, len(messages)):
                batch.take(messages[index])
            added = self._append(batch.resolved()) if batch.events else []
            if messages:
                self._host = batch.settle([event.seq for event in added])
                self._host.count, self._host.tail = len(messages), list(messages[-TAIL:])
            if pending is not None:
                at = self._host.open.get(pending.id)
                if isinstance(at, int) and self._undecided(self.sites[at], pending):
                    self._pending[pending.id] = at
                else:
                    self._pending.pop(pending.id, None)

    def judge(self, call: ToolCall, judged: Judged) -> None:
        """Record the guard's decision on ``call`` (``allow`` or ``block``)."""
        with self._lock:
            at = self._pending.pop(call.id, None)
            if at is not None and self._undecided(self.sites[at], call):
                self._append([NewEvent(kind="judge", call_id=call.id, answers=self.sites[at].seq, judged=judged)])
                return
            place = self._unshown_place()
            event = NewEvent(
                kind="call", call_id=call.id, tool=call.name, arguments=call.arguments, judged=judged, place=place
            )
            self._append([event])

    def record_result(self, call_id: str, content: str, *, is_error: bool = False) -> bool:
        """The fate of the newest unanswered call ``call_id``: executed, with this result (an error result:
        the tool refused or failed). False when no call of that id is waiting for one."""
        with self._lock:
            at = self._waiting_for(call_id)
            if at is None:
                return False
            site = self.sites[at]
            self._append(
                [NewEvent(kind="result", call_id=call_id, answers=site.seq, content=content, is_error=is_error)]
            )
            return True  # the host's copy of the result, when it comes, finds the call answered and is skipped

    def record_unknown(self, call_id: str, why: str) -> bool:
        """The newest unanswered call ``call_id`` may or may not have run (``why``: cancelled, timed out...)."""
        with self._lock:
            at = self._waiting_for(call_id)
            if at is None or self.sites[at].unknown is not None:
                return False
            self._append([NewEvent(kind="unknown", call_id=call_id, answers=self.sites[at].seq, content=why)])
            return True

    def _waiting_for(self, call_id: str) -> int | None:
        """The newest unanswered call ``call_id``, reading the store first when this object does not know it: the
        call may have been recorded by another process (a one-shot hook process that judged it, a replica)."""
        at = self._open.get(call_id)
        if at is None:
            self.sync()
            at = self._open.get(call_id)
        return at

    def add_fetched(self, pending: ToolCall, reads: list[tuple[ToolCall, str, bool]]) -> None:
        """Record reads the guard made itself while judging ``pending``: ``(call, result text, is_error)``.

        Their ids carry :data:`policyguard.gate.facts.FETCH_ID_PREFIX` (they never
        authenticate anyone). Each takes the pending call's place, before it
        (same message number): a later rule sees it as made before the pending
        write and before any other write of that message, never newer than one.
        """
        if not reads:
            return
        with self._lock:
            at = self._pending.get(pending.id)
            group = (self._direct_group, self._direct_next)
            place = self.sites[at].place if at is not None else self._unshown_place()
            events: list[NewEvent] = []
            for call, content, is_error in reads:
                events.append(NewEvent(kind="call", call_id=call.id, tool=call.name, arguments=call.arguments,
                                       judged="allow", place=place))  # fmt: skip
                events.append(NewEvent(kind="result", call_id=call.id, answers=-1, content=content, is_error=is_error))
            self._append(events)
            if at is None and group[0] is not None:  # the pending call still joins its concurrent siblings
                self._direct_group, self._direct_next = group[0], max(group[1], place[1] + 1)

    def view(self, pending: ToolCall | None = None) -> RecordView:
        """The record as the gate reads it for ``pending``: the calls not blocked, in the order the host
        issued them, with their results.

        When the host's history shows ``pending`` issued, only the calls placed
        before it count, as when the history is read once: a later sibling of
        its message (judged first by a concurrent check) is not taken as having
        happened before it. A call the host issued that was neither judged nor
        answered counts while the host's history shows it, as the one-shot
        reader counts it; a judged or answered one counts always.
        """
        with self._lock:
            at = self._pending.get(pending.id) if pending is not None else None
            cut = self.sites[at].place if at is not None else None
            self._extend_settled()
            cached = self._cache
            end = len(cached) if cut is None else bisect.bisect_left(cached, cut, key=lambda site: site.order)
            sites = cached[:end]
            successes = {
                tool: results[: bisect.bisect_left(indices, end)]
                for tool, (indices, results) in self._cache_successes.items()
                if indices[0] < end
            }
            if end == len(cached):  # the rest of the record: the sites whose visibility may still change
                shown = {ref for ref in self._host.open.values() if isinstance(ref, int)}
                for position in range(self._cached, len(self._order)):
                    index = self._order[position]
                    site = self.sites[index]
                    if cut is not None and site.place >= cut:
                        break
                    if not self._visible(site, index, shown):
                        continue
                    sites.append(CallSite(site.call, site.place, site.result))
                    result = site.result
                    if result is not None and not result.is_error:
                        successes.setdefault(site.call.name, []).append(result)
            return RecordView(sites, dict(self._said), successes)

    @staticmethod
    def _visible(site: _Site, index: int, shown: set[int]) -> bool:
        """Whether the gate sees ``site``: not blocked, and judged, answered, of unknown fate or still shown."""
        if site.judged == "block":
            return False
        return not (site.judged == "seen" and site.result is None and site.unknown is None and index not in shown)

    @staticmethod
    def _settled(site: _Site) -> bool:
        """Whether ``site``'s visibility no longer depends on the host's history: judged, answered or unknown.
        (What can still change it, a result or a judgement, un-settles it: :meth:`_unsettle`.)"""
        return site.judged != "seen" or site.result is not None or site.unknown is not None

    def _extend_settled(self) -> None:
        """Extend the view's settled prefix over the settled sites that follow it in ``_order``.

        Every check reads the whole record; this keeps what cannot have changed since the last check, so a
        check at message 2,000 builds the view of only the sites that changed, not of all of them. A site
        that changes, or a site placed inside the prefix, cuts the prefix back to it (:meth:`_unsettle`).
        """
        order, cache, marks = self._order, self._cache, self._marks
        while self._cached < len(order):
            index = order[self._cached]
            site = self.sites[index]
            if not self._settled(site):
                return
            marks.append(len(cache))
            self._cached += 1
            if site.judged == "block":
                continue
            result = site.result
            if result is not None and not result.is_error:
                indices, results = self._cache_successes.setdefault(site.call.name, ([], []))
                indices.append(len(cache))
                results.append(result)
            cache.append(CallSite(site.call, site.place, result))

    def _unsettle(self, position: int) -> None:
        """Cut the view's settled prefix back to ``_order`` entry ``position`` (it changed or moved)."""
        if position >= self._cached:
            return
        keep = self._marks[position]
        del self._cache[keep:], self._marks[position:]
        self._cached = position
        for tool in list(self._cache_successes):
            indices, results = self._cache_successes[tool]
            kept = bisect.bisect_left(indices, keep)
            del indices[kept:], results[kept:]
            if not indices:
                del self._cache_successes[tool]

    def _position(self, index: int) -> int:
        """Where site ``index`` is in ``_order``."""
        key = self.sites[index].key
        return bisect.bisect_left(self._order, key, key=lambda at: self.sites[at].key)

    def _insertion(self, key: tuple[int, int, int]) -> int:
        """Where a new site of ``key`` goes in ``_order``: at the end when it is the newest (most are)."""
        order = self._order
        if not order or self.sites[order[-1]].key < key:
            return len(order)
        return bisect.bisect_right(order, key, key=lambda index: self.sites[index].key)

    def _unsettle_site(self, index: int) -> None:
        """:meth:`_unsettle` at site ``index``'s place, found only when it is inside the settled prefix (keys are
        unique and ``_order`` is sorted by them, so it is exactly when its key is not past the prefix's last)."""
        if self._cached and self.sites[index].key <= self.sites[self._order[self._cached - 1]].key:
            self._unsettle(self._position(index))

    def await_earlier_reads(self, pending: ToolCall, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds, holding the session) for the results of the reads issued before
        ``pending`` in its message: a framework runs them beside it, and the write is judged with what they
        return, the state before it, as the history read once will show them. A read still unanswered then
        is judged as such (the fact it would give is missing). Writes issued before it are not waited for:
        they wait for their turn."""
        deadline = time.monotonic() + timeout
        with self._changed:
            at = self._pending.get(pending.id)
            if at is None:
                return
            number, position = self.sites[at].place
            while time.monotonic() < deadline:
                earlier = (self.sites[i] for i in self._by_message.get(number, ()))
                if not any(
                    site.place[1] < position
                    and site.result is None
                    and site.unknown is None
                    and site.judged != "block"
                    and not self._is_mutating(site.call.name)
                    for site in earlier
                ):
                    return
                self._changed.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                self.sync()

    def place_of(self, call: ToolCall) -> str:
        """Where the host issued ``call``, as deny wins names an issuance ("message.position"); "" when the
        record has it only as a call already decided (a check of it again) or not at all."""
        with self._lock:
            at = self._pending.get(call.id)
            if at is None or not self._undecided(self.sites[at], call):
                return ""
            number, position = self.sites[at].place
            return f"{number}.{position}"

    def unsettled(self) -> list[tuple[str, str]]:
        """Allowed writes with no result: ``(tool, why)`` for each (why: the unknown's reason, or still running)."""
        with self._lock:
            return [
                (site.call.name, site.unknown or "no result yet")
                for site in self.sites
                if site.judged == "allow" and site.result is None and self._is_mutating(site.call.name)
            ]

    def claim_writes(
        self, turn: object, timeout: float, pending: ToolCall | None = None, fates_timeout: float | None = None
    ) -> bool:
        """Take the session's write turn for one check (``turn``, any object) until :meth:`release`.

        Waits until no other check holds the turn and no allowed write is still
        running, so a write is judged with every earlier write of the session
        in the record. False when another check still holds the turn after
        ``timeout`` seconds (the write must not be judged without it) or the
        turn was released while waiting (its check was cancelled). A write
        still running after ``fates_timeout`` (default ``timeout``) no longer
        delays the turn: it counts as unknown for this check. A running write
        that is ``pending`` itself (a check of it again) is not waited for: the
        check refuses it at once.
        """
        now = time.monotonic()
        deadline = now + timeout
        fates_deadline = now + (timeout if fates_timeout is None else min(timeout, fates_timeout))
        with self._changed:
            self._waiting.add(turn)
            try:
                while turn not in self._abandoned:
                    now = time.monotonic()
                    if self._turn is None:
                        if now >= fates_deadline or not self._others_running(pending):
                            break
                        self._changed.wait(fates_deadline - now)
                    elif now >= deadline:
                        return False
                    else:
                        self._changed.wait(deadline - now)
                if turn in self._abandoned:
                    return False
                self._turn = turn
                return True
            finally:
                self._waiting.discard(turn)
                self._abandoned.discard(turn)

    def claim(
        self,
        turn: object,
        timeout: float,
        *,
        write: bool,
        pending: ToolCall | None = None,
        fates_timeout: float | None = None,
    ) -> bool:
        """Take this session for one check (``turn``) until :meth:`release`: a write first takes the write
        turn (:meth:`claim_writes`), then every check takes the store's hold on the session, so the checks of
        one session are judged one at a time across threads, guards and replicas sharing the store (each
        store says how: a lock in memory, a file lock beside an SQLite file, an advisory lock in
        PostgreSQL). Holding it, the record is brought up to date, and a write waits (until ``fates_timeout``,
        default ``timeout``) for the fates of earlier allowed writes, other replicas' too. False when the
        session could not be had in time, or the check was released (cancelled) meanwhile.
        """
        now = time.monotonic()
        deadline = now + timeout
        fates_deadline = now + (timeout if fates_timeout is None else min(timeout, fates_timeout))
        with self._lock:
            self._claiming.add(turn)
        try:
            if write and not self.claim_writes(turn, timeout, pending, fates_timeout):
                return False
            hold = self._store_hold(max(0.0, deadline - time.monotonic()))
            with self._changed:
                if hold is None or turn in self._released:
                    if hold is not None:
                        hold.release()
                    self._release_turn(turn)
                    return False
                self._holds[turn] = hold
        finally:
            with self._lock:
                self._claiming.discard(turn)
                self._released.discard(turn)
        if write:
            self._await_other_writes(fates_deadline, pending)
        return True

    def holding(self, turn: object) -> bool:
        """Whether ``turn`` holds this session (:meth:`claim`)."""
        with self._lock:
            return turn in self._holds

    def release(self, turn: object) -> None:
        """End ``turn``'s hold on the session and on the write turn; a check still waiting gives up. Idempotent."""
        with self._changed:
            hold = self._holds.pop(turn, None)
            if hold is None and turn in self._claiming:
                self._released.add(turn)  # a claim still waiting in a worker thread lets go once it gets the hold
            self._release_turn(turn)
        if hold is not None:
            hold.release()

    def _release_turn(self, turn: object) -> None:
        if self._turn is turn:
            self._turn = None
            self._changed.notify_all()
        elif turn in self._waiting:
            self._abandoned.add(turn)
            self._changed.notify_all()

    def _store_hold(self, timeout: float) -> Any:
        """The store's hold on this session (None: not had in time); a store without holds needs none."""
        hold = getattr(self.store, "hold", None)
        if hold is None:
            return _NO_HOLD
        return hold(self.id, timeout)

    def _others_running(self, pending: ToolCall | None) -> bool:
        """Whether an allowed write other than ``pending`` is still running."""
        if pending is None:
            return bool(self._running_writes)
        return any(not self._same_call(self.sites[at].call, pending) for at in self._running_writes)

    def _await_other_writes(self, deadline: float, pending: ToolCall | None) -> None:
        """Holding the session, wait for the fates of allowed writes still running (another replica's too:
        their results reach the store without the hold); one still running at ``deadline`` counts as unknown."""
        self.sync()
        with self._changed:
            while self._others_running(pending) and time.monotonic() < deadline:
                self._changed.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                self.sync()

    def id_problem(self, call: ToolCall) -> str | None:
        """Why ``call``'s id cannot name a new call in this session, or None."""
        with self._lock:
            if call.id not in self._pending and self._answered_in_host(call):
                return "was already answered by a tool result"
            at = self._open.get(call.id)
            if at is None:
                return None
            site = self.sites[at]
            if (site.call.name, site.call.arguments) != (call.name, call.arguments):
                return "is used by another call in this session that is not answered"
            if site.judged == "allow":
                return "was allowed already in this session and its outcome is not known yet"
            return None

    # -- internals ------------------------------------------------------------

    @staticmethod
    def _same(a: ToolCall, b: ToolCall) -> bool:
        return (a.name, a.arguments) == (b.name, b.arguments)

    @staticmethod
    def _same_call(a: ToolCall, b: ToolCall) -> bool:
        return a.id == b.id and (a.name, a.arguments) == (b.name, b.arguments)

    def _unshown_place(self) -> tuple[int, int]:
        """The place of a call the host's history has not shown: after everything the record holds, beside
        the calls judged so since the last other event (they may run concurrently)."""
        if self._direct_group is not None:
            return (self._direct_group, self._direct_next)
        return (self._message + 1, 0)

    def _undecided(self, site: _Site, call: ToolCall) -> bool:
        """``site`` is ``call`` as the host issued it, still to be judged: not judged, no fate known. (A
        host call matched to a site already decided is taken as a new call reusing its id and arguments.)"""
        return site.judged == "seen" and site.result is None and site.unknown is None and self._same(site.call, call)

    def sites_of(self, call_id: str) -> list[int]:
        """The record's sites of calls with this id, oldest first."""
        return self._by_id.get(call_id, [])

    def _answered_in_host(self, call: ToolCall) -> bool:
        """The host's history shows this very call answered (it ran): checking it again cannot run it again."""
        if call.id not in self._host.answered:
            return False
        sites = self._by_id.get(call.id)
        if not sites:
            return False
        site = self.sites[sites[-1]]  # the newest call of that id
        return self._same(site.call, call) and site.result is not None

    def _is_pending(self, site: _Site) -> bool:
        """An allowed write of this session still running: no result, not declared unknown."""
        return (
            site.judged == "allow"
            and site.result is None
            and site.unknown is None
            and self._is_mutating(site.call.name)
        )

    def _append(self, events: list[NewEvent]) -> list[SessionEvent]:
        """Append to the store, then apply everything up to and including these events (other replicas' too).

        A store numbers a session's events one after the other in one write transaction, so events numbered
        right after the newest this object applied are applied as returned; a gap (another guard or replica
        appended meanwhile) is read from the store first."""
        try:
            added = self.store.append_events(self.id, events)
        except SessionEvicted as exc:
            self.evicted = str(exc)
            raise
        if [event.seq for event in added] == list(range(self._seq + 1, self._seq + 1 + len(added))) and added:
            # numbered right after what we hold: nobody appended between, so no read of the store is needed
            for event in added:
                self._apply(event)
        else:
            self.sync()
        self._changed.notify_all()
        return added

    def _apply(self, event: SessionEvent) -> None:
        self._seq = event.seq
        direct_group, self._direct_group = self._direct_group, None  # any event but a direct call closes it
        if event.kind == "call":
            place = event.place if event.place is not None else (event.seq, 0)  # a record written before places
            at = len(self.sites)
            direct = event.judged != "seen"
            site = _Site(ToolCall(id=event.call_id, name=event.tool, arguments=event.arguments), event.seq,
                         event.judged, place, direct=direct)  # fmt: skip
            if direct and place[0] >= self._message:
                previous = self._direct_next if direct_group == place[0] else 0
                self._direct_group, self._direct_next = place[0], max(previous, place[1] + 1)
            self.sites.append(site)
            position = self._insertion(site.key)
            self._unsettle(position)  # placed inside the view's settled prefix (a read fetched for an older call)
            self._order.insert(position, at)
            self._message = max(self._message, place[0])
            if self._is_pending(site):
                self._running_writes.add(at)
            self.site_at[event.seq] = at
            self._open[event.call_id] = at
            self._by_id.setdefault(event.call_id, []).append(at)
            self._by_message.setdefault(place[0], []).append(at)
        elif event.kind == "judge":
            at = self.site_at.get(event.answers)  # type: ignore[assignment]
            if at is None or self.sites[at].judged != "seen":
                return
            site = self.sites[at]
            self._unsettle_site(at)
            site.judged = event.judged
            if self._is_pending(site):
                self._running_writes.add(at)
        elif event.kind in ("result", "unknown"):
            answered = self.site_at.get(event.answers)
            if answered is None:
                return
            at = answered
            site = self.sites[at]
            if site.result is not None:
                return
            self._unsettle_site(at)
            self._running_writes.discard(at)
            if event.kind == "unknown":
                site.unknown = event.content or "unknown"
                return
            site.result = ToolResult(
                call=site.call, content=event.content, is_error=event.is_error, index=event.seq, order=site.place
            )
            site.unknown = None
            if self._open.get(site.call.id) == at:
                del self._open[site.call.id]
        elif event.kind == "user":
            place = event.place if event.place is not None else (event.seq, 0)
            self._message = max(self._message, place[0])
            for word in user_words(event.content):
                self._said.setdefault(word, place[0])
