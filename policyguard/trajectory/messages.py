"""The provider-neutral data model: tool calls, messages, trajectories.

Converters in :mod:`policyguard.trajectory.formats` read and write OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages; the guard only sees these types.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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
        self.call_id = call_id


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
        """
        sites: list[CallSite] = []
        open_calls: dict[str, int] = {}  # id -> index in sites of its unanswered call
        answered: set[str] = set()
        for index, message in enumerate(self.messages):
            if message.role == "assistant":
                for position, call in enumerate(message.tool_calls):
                    if call.id in open_calls:
                        raise DuplicateCallId(call.id, "is used by two calls before the first is answered")
                    open_calls[call.id] = len(sites)
                    answered.discard(call.id)
                    sites.append(CallSite(call, (index, position), None))
            elif message.role == "tool" and message.tool_call_id is not None:
                at = open_calls.pop(message.tool_call_id, None)
                if at is None:
                    if message.tool_call_id in answered:
                        raise DuplicateCallId(message.tool_call_id, "has two results")
                    continue
                answered.add(message.tool_call_id)
                call, order = sites[at].call, sites[at].order
                # validated: pydantic's model_construct is slower than its validator for a model this small
                result = ToolResult(
                    call=call, content=message.content or "", is_error=message.is_error, index=index, order=order
                )
                sites[at] = CallSite(call, order, result)
        return sites

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
        self._sites = list(trajectory.call_sites())
        self._results = [site.result for site in self._sites if site.result is not None]
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
        successes: dict[str, list[ToolResult]] = {}
        for result in self._results:
            if not result.is_error:
                successes.setdefault(result.call.name, []).append(result)
        return successes
