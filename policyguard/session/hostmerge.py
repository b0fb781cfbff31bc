"""How the host's history enters a session's record: each call at the place the host issued it.

:meth:`~policyguard.session.record.Session.observe` reads only the host
messages the record has not ingested (see :class:`HostState`) and turns them
into events, all computed before any is appended (an ambiguous pairing appends
nothing):

* a user message becomes a ``user`` event at the next message number;
* an assistant message's calls become ``seen`` call events at ``(message
  number, position)``, the moment the host *issued* them, whether or not a
  result ever comes and whichever order results come in. A call the record
  already has (judged before the history showed it, or ingested by another
  replica) is matched to it instead, and the message takes that call's number,
  so its siblings stay in the same message;
* a tool message answers the call the host issued with its id: the result is
  added, unless the record already knows the fate (an allowed call's error
  result in the host's history is never taken; the integration that ran it
  reports failures).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from policyguard.trajectory.messages import DuplicateCallId, Message, ToolCall
from policyguard.trajectory.words import user_words

from .events import NewEvent

if TYPE_CHECKING:  # pragma: no cover
    from .record import Session

TAIL = 3  # host messages that must match to take up the history where the last observe stopped

# A site of the record: its index, or ("new", k) for the k-th event of the batch being computed.
SiteRef = int | tuple[str, int]


class HostState:
    """Where the host's history stood at the last observe (this process only)."""

    __slots__ = ("count", "tail", "open", "answered", "matched")

    def __init__(
        self,
        *,
        open: dict[str, SiteRef] | None = None,
        answered: set[str] | None = None,
        matched: set[int] | None = None,
    ) -> None:
        self.count = 0
        self.tail: list[Message] = []  # the last messages ingested (up to TAIL), oldest first
        self.open: dict[str, SiteRef] = {} if open is None else open  # unanswered host call id -> its record site
        self.answered: set[str] = set() if answered is None else answered  # host call ids answered (twice: ambiguous)
        self.matched: set[int] = set() if matched is None else matched  # record sites a host call stands for


class Batch:
    """The events one observe adds, computed before anything is appended."""

    def __init__(self, session: Session, host: HostState, last_message: int, said: Mapping[str, int]) -> None:
        self.session = session
        self.host_open: dict[str, SiteRef] = dict(host.open)  # small: the calls the host has not answered
        # The answered ids and matched sites grow with the history: read in place, changed only by settle (so a
        # batch that raises leaves them as they were); what this batch changes is kept beside them.
        self._answered = host.answered
        self._answered_now: dict[str, bool] = {}  # call id -> whether it is answered once the batch is in
        self._matched = host.matched
        self._matched_now: set[int] = set()
        self.message = last_message  # the newest message number the record holds
        self.events: list[dict[str, Any]] = []  # NewEvent fields; 'answers' may be ("new", k)
        self._said = said  # the record's words, each at the place it was first said
        self._heard: set[str] = set()  # the words this batch's user events add

    def take(self, message: Message) -> None:
        if message.role == "user" and message.content:
            self.message += 1
            # A user message counts only for the words it is the first to say (the record keeps each word at
            # its first place). One that says none is not recorded: a session object that did not ingest the
            # history itself (a one-shot hook process, another replica) reads it from the start, and would
            # otherwise add every user message again on every check.
            words = [w for w in user_words(message.content) if w not in self._said and w not in self._heard]
            if words:
                self._heard.update(words)
                self.events.append({"kind": "user", "content": message.content, "place": (self.message, 0)})
        elif message.role == "assistant" and message.tool_calls:
            self._issue(message.tool_calls)
        elif message.role == "tool" and message.tool_call_id is not None:
            self._answer(message)

    def _issue(self, calls: list[ToolCall]) -> None:
        ids = [call.id for call in calls]
        for call in calls:
            if ids.count(call.id) > 1:
                raise DuplicateCallId(call.id, "is used twice in one message")
            if call.id in self.host_open:
                raise DuplicateCallId(call.id, "is used by two calls before the first is answered")
        found = [self._recorded_site(call) for call in calls]
        sites = self.session.sites
        # A call the guard judged before the host showed it, with nothing numbered after it yet: this message
        # is where it was issued, so its siblings share its number (a read issued with it is not after it).
        # Any other match (an old call whose id, tool and arguments a new one reuses, after the history was
        # rewritten) never pulls new calls back in time: they take the next number.
        direct = [sites[at].place[0] for at in found if at is not None and sites[at].direct]
        if direct and max(direct) == self.message:
            number = self.message
        else:
            self.message += 1
            number = self.message
        for position, (call, at) in enumerate(zip(calls, found, strict=True)):
            self._answered_now[call.id] = False
            ref: SiteRef
            if at is None:
                self.events.append(
                    {
                        "kind": "call",
                        "call_id": call.id,
                        "tool": call.name,
                        "arguments": call.arguments,
                        "place": (number, position),
                    }
                )
                ref = ("new", len(self.events) - 1)
            else:
                ref = at
            self.host_open[call.id] = ref

    def _recorded_site(self, call: ToolCall) -> int | None:
        """The record site this host call stands for, if the record has it: the oldest not yet matched with
        the same id, tool and arguments.

        A session object that did not ingest the history itself (another
        replica, or one rebuilt from the store) reads it from the start: its
        calls are matched to the record instead of added twice. Matching by id,
        tool and arguments can take a new call for an old one that reused all
        three; its result is then not taken (the old one has its own) and an
        allowed call stays counted, which errs towards blocking.
        """
        session = self.session
        for at in session.sites_of(call.id):
            site = session.sites[at]
            if at in self._matched or at in self._matched_now:
                continue
            if (site.call.name, site.call.arguments) == (call.name, call.arguments):
                self._matched_now.add(at)
                return at
        return None

    def _answer(self, message: Message) -> None:
        call_id = message.tool_call_id
        assert call_id is not None
        target = self.host_open.pop(call_id, None)
        if target is None:
            if self._answered_now.get(call_id, call_id in self._answered):
                raise DuplicateCallId(call_id, "has two results")
            return  # answers no call the host showed: not trusted
        self._answered_now[call_id] = True
        answers: Any = target
        if isinstance(target, int):
            site = self.session.sites[target]
            if site.result is not None or site.unknown is not None:
                return  # the record has its answer, or knows nobody can tell: the host's history cannot change it
            if message.is_error and site.judged == "allow":
                # A failure the host's history claims for an allowed call is not taken: ids, tools and arguments
                # can all repeat, so it may be another call's error, and taking it would un-count a write that
                # may have run. The integration that ran the call reports failures (record_result).
                return
            answers = site.seq
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

    def settle(self, seqs: list[int]) -> HostState:
        """The host state after the batch's events were appended as numbers ``seqs``: every reference to a
        new call becomes its record site."""
        site_at = self.session.site_at
        opened: dict[str, SiteRef] = {}
        for call_id, ref in self.host_open.items():
            if isinstance(ref, tuple):
                ref = site_at[seqs[ref[1]]]
            opened[call_id] = ref
        answered, matched = self._answered, self._matched  # the last state's: it is replaced by this one
        for call_id, now in self._answered_now.items():
            if now:
                answered.add(call_id)
            else:
                answered.discard(call_id)
        matched |= self._matched_now
        for index, fields in enumerate(self.events):
            if fields["kind"] == "call":
                matched.add(site_at[seqs[index]])
        return HostState(open=opened, answered=answered, matched=matched)


def host_start(host: HostState, messages: list[Message]) -> int | None:
    """The first host message the record has not ingested, or None when nothing we saw is left.

    The history goes on from where the last observe stopped when its last
    messages are still there: at the same place (a loop that appends), or
    elsewhere (a summary replaced what came before). They are looked for by
    identity first, then by value; several messages must match, so a repeated
    message (ids reused, same result) is not taken for the place.
    """
    tail = host.tail
    if not tail:
        return 0
    count = host.count
    if len(messages) >= count:  # a loop that appended: the tail is where it was
        where = messages[count - len(tail) : count]
        if _identical(where, tail) or _equal(where, tail):
            return count
    for same in (_identical, _equal):
        for end in range(len(messages), len(tail) - 1, -1):  # newest place first
            if same(messages[end - len(tail) : end], tail):
                return end
    return None


def _identical(found: list[Message], tail: list[Message]) -> bool:
    return len(found) == len(tail) and all(a is b for a, b in zip(found, tail, strict=True))


def _equal(found: list[Message], tail: list[Message]) -> bool:
    return len(found) == len(tail) and all(a is b or a == b for a, b in zip(found, tail, strict=True))
