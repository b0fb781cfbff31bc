"""The provider-neutral data model: tool calls, messages, trajectories.

Converters in :mod:`policyguard.trajectory.formats` read and write OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages; the guard only sees these types.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, SupportsIndex

from pydantic import BaseModel, ConfigDict, Field

from .canonical import args_sha256
from .limits import LimitError, loads_json
from .strictjson import DuplicateKeyError

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One call the agent asked for: its id, the tool's name and the parsed arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @property
    def args_sha256(self) -> str:
        """The sha256 of the canonical arguments.

        Computed on every access, never cached: ``arguments`` is a dict and can be
        mutated after a decision, and a stale hash would let the executor accept
        arguments that were changed after the allow.
        """
        return args_sha256(self.arguments)

    def args_sha256_or_none(self) -> str | None:
        """:attr:`args_sha256`, or None when the arguments cannot be hashed canonically.

        NaN, Infinity and nesting past Python's recursion limit cannot be
        encoded; the guard and the gate block such a call and record no hash.
        """
        try:
            return args_sha256(self.arguments)
        except (ValueError, TypeError, RecursionError):
            return None


class Message(BaseModel):
    """One turn. Tool results have ``role="tool"`` and the ``tool_call_id`` they answer."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


class DuplicateCallId(ValueError):
    """Two unanswered calls share one id, or one call has two results: the pairing is ambiguous, so refuse it."""

    def __init__(self, call_id: str, what: str) -> None:
        super().__init__(f"tool call id {call_id!r} {what}: calls and results cannot be paired by id")
        self.call_id, self.what = call_id, what


class ToolResult(BaseModel):
    """A read the environment answered: the call and its result text.

    ``index`` is where the result message sits; ``order`` is where the CALL was
    made (assistant message index, position in it). Facts are ordered by
    ``order``: a result appended late is not newer than a call made after its
    own call.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    call: ToolCall
    content: str
    is_error: bool = False
    index: int
    order: tuple[int, int] = (-1, 0)

    def json(self) -> Any:  # type: ignore[override]
        """The result parsed as strict JSON within :mod:`policyguard.trajectory.limits`, or ``None``."""
        try:
            return loads_json(self.content)
        except (TypeError, ValueError, RecursionError):
            return None

    def json_problem(self) -> tuple[Any, str | None]:
        """``(value, None)`` for a readable result, else ``(None, why it is not JSON data)``."""
        return parse_result_text(self.content)


def parse_result_text(content: str) -> tuple[Any, str | None]:
    """``(value, None)`` for a tool result text that is JSON data within the limits, else ``(None, why not)``."""
    try:
        return loads_json(content), None
    except LimitError as exc:
        return None, f"over a limit ({exc})"
    except DuplicateKeyError as exc:
        return None, f"not JSON ({exc})"
    except (TypeError, ValueError, RecursionError):
        return None, "not JSON"


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call the agent made, where it made it, and its result (None while unanswered)."""

    call: ToolCall
    order: tuple[int, int]
    result: ToolResult | None


class Trajectory(BaseModel):
    """The dialogue so far, in order, as the agent sees it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    messages: list[Message] = Field(default_factory=list)

    def call_sites(self) -> list[CallSite]:
        """Every assistant call in call order, each with its result if one answers it.

        A result answers the most recent unanswered call with its id, so an id
        reused after its earlier call was answered pairs unambiguously (some
        serving stacks reuse ids that way). Raises :class:`DuplicateCallId` when
        the pairing is ambiguous: an id used twice in one message, a call reusing
        the id of a call that is still unanswered, or a second result for an id
        whose call is already answered. Pairing by position is never tried.
        A tool message that answers no earlier call is ignored (not trusted).

        A list converted message by message (:class:`PairedMessages`) brings its
        pairing along; any other list is paired here (:class:`Pairing`).
        """
        return paired(self.messages).call_sites()

    def tool_results(self) -> Iterator[ToolResult]:
        """Each answered call's result, in call order (raises :class:`DuplicateCallId`).

        Only results whose ``tool_call_id`` matches an earlier assistant call
        count: a tool message that answers no call is not a trusted fact.
        """
        return iter([site.result for site in self.call_sites() if site.result is not None])

    def duplicate_call_id(self) -> DuplicateCallId | None:
        """The duplicate-id problem of this trajectory, or None when calls and results pair cleanly."""
        try:
            self.call_sites()
        except DuplicateCallId as exc:
            return exc
        return None

    def without_call(self, call_id: str) -> Trajectory:
        """A copy with the newest call of that id removed from its message (and any result for it).

        Earlier calls that used the same id and were answered before it was
        reused are other calls: they stay.
        """
        last = max((i for i, m in enumerate(self.messages) if any(c.id == call_id for c in m.tool_calls)), default=-1)
        kept: list[Message] = []
        for index, message in enumerate(self.messages):
            if index > last and message.role == "tool" and message.tool_call_id == call_id:
                continue
            if index == last:
                calls = [c for c in message.tool_calls if c.id != call_id]
                if not calls and not message.content:
                    continue
                message = message.model_copy(update={"tool_calls": calls})
            kept.append(message)
        return Trajectory(messages=kept)

    def append(self, message: Message) -> None:
        self.messages.append(message)


class HasToolResults(Protocol):
    """Anything that lists trusted calls and results: a Trajectory or a ToolResultsView."""

    def tool_results(self) -> Iterator[ToolResult]: ...

    def call_sites(self) -> list[CallSite]: ...


class ToolResultsView:
    """A trajectory's calls and results computed once, for code that scans them many times per call.

    Raises :class:`DuplicateCallId` (at construction) on an ambiguous trajectory.
    """

    def __init__(self, trajectory: HasToolResults) -> None:
        self._open: dict[str, int] | None = None
        if isinstance(trajectory, Trajectory):  # paired message by message: once, or as it was converted
            pairing = paired(trajectory.messages)
            self._sites = pairing.call_sites()
            self._results = pairing.results
            self._successes: dict[str, list[ToolResult]] | None = pairing.successes
            self._open = pairing.open
        else:
            self._sites = list(trajectory.call_sites())
            self._results = [site.result for site in self._sites if site.result is not None]
            self._successes = None
        # the dialogue itself, for what only its text says (a user id the user stated): a reference, not a copy
        self.messages: list[Message] | None = getattr(trajectory, "messages", None)
        said = getattr(trajectory, "said_words", None)
        if said is not None:  # a session record: its user words are numbered like its calls
            self.said_words = said

    def tool_results(self) -> Iterator[ToolResult]:
        return iter(self._results)

    def call_sites(self) -> list[CallSite]:
        return self._sites

    def successes_by_tool(self) -> dict[str, list[ToolResult]]:
        """Successful results by tool, in call order (what a prerequisite read needs)."""
        if self._successes is None:
            self._successes = group_successes(self._results)
        return self._successes

    def unanswered(self, call_id: str) -> CallSite | None:
        """The call with this id that no result answers (at most one: two would not have paired)."""
        if self._open is None:
            self._open = {site.call.id: at for at, site in enumerate(self._sites) if site.result is None}
        at = self._open.get(call_id)
        return None if at is None else self._sites[at]


def group_successes(results: Iterable[ToolResult]) -> dict[str, list[ToolResult]]:
    """The non-error results by tool, in the order given (what a prerequisite read needs)."""
    successes: dict[str, list[ToolResult]] = {}
    for result in results:
        if not result.is_error:
            successes.setdefault(result.call.name, []).append(result)
    return successes


# -- pairing ------------------------------------------------------------------
# Trajectory.call_sites pairs through Pairing, the one implementation of the rules. A converter that reads a
# growing list message by message (formats.chat_history.ChatHistory) feeds each message once and hands out a
# PairedMessages list carrying a copy of the pairing as it stood (Paired), so a check at message 2,000 does not
# pair the 1,999 before it again. Any edit of that list through its methods drops the pairing, and a pairing whose
# message count differs from the list's length is never read: such a list is paired afresh.


class Paired:
    """A pairing as it stood after ``count`` messages; feeding more messages does not change it.

    ``results``: the answered calls' results, in call order; ``successes``: the
    non-error ones by tool, in call order; ``open``: call id -> the index in
    ``sites`` of its unanswered call; ``mentioned``: call id -> the newest
    message naming it (a call in any role, or a result), None when not kept.
    (A plain class: a dataclass costs a cold start about 0.6 ms to build.)
    """

    __slots__ = ("count", "problem", "sites", "results", "successes", "open", "mentioned")

    def __init__(
        self,
        count: int,
        problem: DuplicateCallId | None,
        sites: list[CallSite],
        results: list[ToolResult],
        successes: dict[str, list[ToolResult]],
        open: dict[str, int],
        mentioned: dict[str, int] | None,
    ) -> None:
        self.count, self.problem, self.sites, self.results = count, problem, sites, results
        self.successes, self.open, self.mentioned = successes, open, mentioned

    def call_sites(self) -> list[CallSite]:
        """The sites (a new list), or raise the first ambiguity met."""
        if self.problem is not None:
            raise DuplicateCallId(self.problem.call_id, self.problem.what)
        return list(self.sites)


class Pairing:
    """Calls and results of one message list, paired as messages are fed (not thread-safe).

    ``tracked`` (for a list that keeps growing) keeps the results, the non-error
    results by tool and the newest message naming each id up to date as each
    message is fed; untracked (a list paired once) lists them when a snapshot is
    taken, and names no message.
    """

    def __init__(self, *, tracked: bool = True) -> None:
        self.count = 0
        self.problem: DuplicateCallId | None = None
        self.tracked = tracked
        self._sites: list[CallSite] = []
        self._open: dict[str, int] = {}
        self._answered: set[str] = set()
        self._results: tuple[list[int], list[ToolResult]] = ([], [])  # (site indices ascending, their results)
        self._successes: dict[str, tuple[list[int], list[ToolResult]]] = {}
        self._mentioned: dict[str, int] = {}

    def feed_all(self, messages: Iterable[Message]) -> Pairing:
        """Pair the next messages, in order (one loop: this is every one-shot check's pairing). The first
        ambiguity is kept in :attr:`problem`; messages after it are only counted."""
        sites, open_calls, answered, successes = self._sites, self._open, self._answered, self._successes
        mentioned = self._mentioned if self.tracked else None
        index = self.count
        try:
            for message in messages:
                answers = message.tool_call_id
                if mentioned is not None:
                    if answers is not None:
                        mentioned[answers] = index
                    for call in message.tool_calls:
                        mentioned[call.id] = index
                if self.problem is not None:
                    pass
                elif message.role == "assistant":
                    for position, call in enumerate(message.tool_calls):
                        if call.id in open_calls:
                            self.problem = DuplicateCallId(call.id, "is used by two calls before the first is answered")
                            break
                        open_calls[call.id] = len(sites)
                        answered.discard(call.id)
                        sites.append(CallSite(call, (index, position), None))
                elif message.role == "tool" and answers is not None:
                    at = open_calls.pop(answers, None)
                    if at is not None:
                        answered.add(answers)
                        call, order = sites[at].call, sites[at].order
                        # validated: pydantic's model_construct is slower than its validator for a model this small
                        result = ToolResult(
                            call=call, content=message.content or "", is_error=message.is_error, index=index,
                            order=order,
                        )  # fmt: skip
                        sites[at] = CallSite(call, order, result)
                        if mentioned is not None:  # in call order; results mostly come in it: appended
                            _insert(self._results, at, result)
                            if not result.is_error:
                                _insert(successes.setdefault(call.name, ([], [])), at, result)
                    elif answers in answered:
                        self.problem = DuplicateCallId(answers, "has two results")
                    # else: answers no call, so it is not trusted: ignored
                index += 1
        finally:
            self.count = index
        return self

    def snapshot(self, *, copy: bool = True) -> Paired:
        """The pairing as it stands now (``copy=False`` when this object is fed no more)."""
        sites, open_calls = self._sites, self._open
        if not self.tracked:
            results = [site.result for site in sites if site.result is not None]
            successes = group_successes(results)
            if copy:
                sites, open_calls = list(sites), dict(open_calls)
            return Paired(self.count, self.problem, sites, results, successes, open_calls, None)
        results, mentioned = self._results[1], self._mentioned
        successes = {tool: found for tool, (_, found) in self._successes.items()}
        if copy:
            sites, results, open_calls, mentioned = list(sites), list(results), dict(open_calls), dict(mentioned)
            successes = {tool: list(found) for tool, found in successes.items()}
        return Paired(self.count, self.problem, sites, results, successes, open_calls, mentioned)


def _insert(ordered: tuple[list[int], list[ToolResult]], at: int, result: ToolResult) -> None:
    """Put ``result`` of the call at site ``at`` in call order (results mostly come in order: at the end)."""
    positions, results = ordered
    if not positions or positions[-1] < at:
        positions.append(at)
        results.append(result)
        return
    where = bisect.bisect(positions, at)
    positions.insert(where, at)
    results.insert(where, result)


class PairedMessages(list[Message]):
    """A converted message list carrying its :class:`Paired`; an edit through any list method drops it."""

    __slots__ = ("pairing",)

    def __init__(self, messages: Iterable[Message] = (), pairing: Paired | None = None) -> None:
        super().__init__(messages)
        self.pairing = pairing

    def __setitem__(self, index: Any, value: Any) -> None:
        self.pairing = None
        super().__setitem__(index, value)

    def __delitem__(self, index: Any) -> None:
        self.pairing = None
        super().__delitem__(index)

    def __iadd__(self, other: Iterable[Message]) -> PairedMessages:  # type: ignore[override,misc]
        self.pairing = None
        return super().__iadd__(other)  # type: ignore[return-value]

    def __imul__(self, times: SupportsIndex) -> PairedMessages:  # type: ignore[override,misc]
        self.pairing = None
        return super().__imul__(times)  # type: ignore[return-value]

    def append(self, message: Message) -> None:
        self.pairing = None
        super().append(message)

    def extend(self, messages: Iterable[Message]) -> None:
        self.pairing = None
        super().extend(messages)

    def insert(self, index: SupportsIndex, message: Message) -> None:
        self.pairing = None
        super().insert(index, message)

    def pop(self, index: SupportsIndex = -1) -> Message:
        self.pairing = None
        return super().pop(index)

    def remove(self, message: Message) -> None:
        self.pairing = None
        super().remove(message)

    def clear(self) -> None:
        self.pairing = None
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self.pairing = None
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self.pairing = None
        super().reverse()


def paired(messages: list[Message]) -> Paired:
    """The pairing of ``messages``: the one an unedited :class:`PairedMessages` carries, else paired now."""
    pairing = carried(messages)
    return pairing if pairing is not None else Pairing(tracked=False).feed_all(messages).snapshot(copy=False)


def carried(messages: Any) -> Paired | None:
    """The pairing ``messages`` carries (an unedited :class:`PairedMessages`), or None: never pairs."""
    if isinstance(messages, PairedMessages):
        pairing = getattr(messages, "pairing", None)  # unset on a list made without __init__ (unpickling)
        if pairing is not None and pairing.count == len(messages):
            return pairing
    return None


def last_mention(messages: list[Message], call_id: str) -> int:
    """Where a backward search for ``call_id`` may start: the newest message naming it (-1: none) when the list
    carries its pairing, else the last message."""
    pairing = carried(messages)
    if pairing is None or pairing.mentioned is None:
        return len(messages) - 1
    return pairing.mentioned.get(call_id, -1)
