"""The provider-neutral data model: tool calls, messages, trajectories.

Converters in :mod:`policyguard.formats` read and write OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages; the guard only sees these types.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .canonical import args_sha256

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


class Message(BaseModel):
    """One turn. Tool results have ``role="tool"`` and the ``tool_call_id`` they answer."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


class ToolResult(BaseModel):
    """A read the environment answered: the call and its result text."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    call: ToolCall
    content: str
    is_error: bool = False
    index: int

    def json(self) -> Any:  # type: ignore[override]
        """The result parsed as JSON, or ``None`` when it is not JSON."""
        try:
            return json.loads(self.content)
        except (TypeError, ValueError):
            return None


class Trajectory(BaseModel):
    """The dialogue so far, in order, as the agent sees it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    messages: list[Message] = Field(default_factory=list)

    def tool_results(self) -> Iterator[ToolResult]:
        """Each tool result paired with the assistant call it answers, in order.

        Only results whose ``tool_call_id`` matches an earlier assistant call
        count: a tool message that answers no call is not a trusted fact.
        """
        pending: dict[str, ToolCall] = {}
        for index, message in enumerate(self.messages):
            if message.role == "assistant":
                for call in message.tool_calls:
                    pending[call.id] = call
            elif message.role == "tool" and message.tool_call_id in pending:
                call = pending.pop(message.tool_call_id)
                # the parts were validated when the messages were built
                yield ToolResult.model_construct(
                    call=call, content=message.content or "", is_error=message.is_error, index=index
                )

    def without_call(self, call_id: str) -> Trajectory:
        """A copy with the call removed from its assistant message (and any result for it)."""
        kept: list[Message] = []
        for message in self.messages:
            if message.role == "tool" and message.tool_call_id == call_id:
                continue
            if any(c.id == call_id for c in message.tool_calls):
                calls = [c for c in message.tool_calls if c.id != call_id]
                if not calls and not message.content:
                    continue
                message = message.model_copy(update={"tool_calls": calls})
            kept.append(message)
        return Trajectory(messages=kept)

    def append(self, message: Message) -> None:
        self.messages.append(message)


class HasToolResults(Protocol):
    """Anything that lists trusted tool results: a Trajectory or a ToolResultsView."""

    def tool_results(self) -> Iterator[ToolResult]: ...


class ToolResultsView:
    """A trajectory's tool results computed once, for code that scans them many times per call."""

    def __init__(self, trajectory: HasToolResults) -> None:
        self._results = list(trajectory.tool_results())

    def tool_results(self) -> Iterator[ToolResult]:
        return iter(self._results)
