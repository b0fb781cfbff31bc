"""Convert between provider message formats and PolicyGuard's :class:`Trajectory`.

Four formats: OpenAI Chat Completions (``"openai_chat"``), OpenAI Responses
(``"openai_responses"``), Anthropic Messages (``"anthropic"``) and LangChain
messages (``"langchain"``). Each module
has ``read`` (provider -> Trajectory), ``write`` (Trajectory -> provider, in a
canonical form that round-trips), a ``tool_call_from_*`` helper and
``tool_error_message(call_id, text)``, the provider's error tool result the
guard uses to hand a blocked call's remediation back to the agent.

Readers raise :class:`~policyguard.errors.FormatError` naming the message index
on anything they cannot read faithfully (invalid JSON arguments, unknown roles
or item types); nothing that could hide a tool call is skipped. In every format:

- a call id used by two calls, or answered by two results, is refused naming
  both message indexes (results are paired with calls by id, never by position);
- call arguments must be a JSON object within :mod:`policyguard.trajectory.limits`: no
  ``NaN``/``Infinity`` (nor ``1e999``, which overflows to infinity), integers
  within 64 bits, at most ``MAX_DEPTH`` levels; the error names the argument;
- a tool result is a failure (``is_error=True``) when the format's flag says so
  (Anthropic ``is_error``; Responses ``status`` ``incomplete``/``in_progress``;
  a non-standard ``is_error`` on Chat and Responses results) or its text starts
  with ``"Error:"``; a flag of the wrong type (``"false"``, ``0``) is refused.
  Writers round-trip the flag (Anthropic ``is_error: true``; the OpenAI formats,
  which have no flag, by the ``"Error: "`` prefix).

Detection (``format="auto"``) picks ``"langchain"`` only for a list of LangChain
message *objects*, which no other format produces; their dict forms
(``model_dump``, ``messages_to_dict``, ``dumpd``) need ``format="langchain"``,
since a ``{"type": ...}`` dict is otherwise read as an OpenAI Responses item.
"""

from __future__ import annotations

from typing import Any, Literal

from policyguard.errors import FormatError

from ..messages import Message, ToolCall, Trajectory
from . import anthropic, langchain, openai_chat, openai_responses
from .anthropic import tool_call_from_anthropic
from .common import plain
from .detect import candidates, choose, detect_format, detect_plain

FormatName = Literal["openai_chat", "openai_responses", "anthropic", "langchain"]
Format = Literal["openai_chat", "openai_responses", "anthropic", "langchain", "auto"]
FORMATS: tuple[FormatName, ...] = ("openai_chat", "openai_responses", "anthropic", "langchain")

__all__ = [
    "FORMATS",
    "Format",
    "FormatName",
    "detect_format",
    "from_trajectory",
    "to_trajectory",
    "tool_call_from_anthropic",
    "tool_call_from_openai",
    "tool_error_message",
]


def _check(format: str) -> None:
    if format not in FORMATS:
        raise FormatError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")


def to_trajectory(messages: Any, format: Format = "auto", *, system: Any = None) -> Trajectory:
    """Read ``messages`` in ``format`` (detected when ``"auto"``) into a :class:`Trajectory`.

    ``messages`` is a message/item list, or a request body: ``{"messages": [...]}``
    (Chat, or Anthropic with ``system``) or ``{"input": ..., "instructions": ...}``
    (Responses). ``system`` is a system prompt kept apart from the messages, as
    Anthropic does; for the OpenAI formats it becomes a leading system message.
    Under ``"auto"`` a separate system prompt settles a tie for Anthropic, and an
    empty list is an empty trajectory (every format reads it alike).
    """
    if format == "auto" and langchain.is_langchain_input(messages):
        format = "langchain"
    if format == "langchain":  # the reader takes message objects as they are (no model_dump)
        return _read_langchain(messages, plain(system))
    messages = plain(messages)
    system = plain(system)
    if format == "auto":
        if isinstance(messages, list) and system is not None:
            format = choose(candidates(messages), separate_system=True)  # type: ignore[assignment]
        elif messages == []:
            format = "openai_chat"
        else:
            format = detect_plain(messages)  # type: ignore[assignment]
    _check(format)
    if isinstance(messages, dict):
        messages, system = _unwrap(messages, system, format)
    # from here on the data is plain: the readers take it as it is, without copying it again
    if format == "anthropic":
        return anthropic.read_plain(messages, system)
    reader = openai_chat.read_plain if format == "openai_chat" else openai_responses.read_plain
    trajectory = reader(messages)
    if system is not None:
        if not isinstance(system, str):
            raise FormatError(f"{format}: a separate system prompt must be a string")
        trajectory.messages.insert(0, Message(role="system", content=system))
    return trajectory


def _read_langchain(messages: Any, system: Any) -> Trajectory:
    if isinstance(messages, dict):  # an agent state or request body: {"messages": [...], "system": ...}
        messages, system = _unwrap(messages, system, "langchain")
    trajectory = langchain.read(messages)
    if system is not None:
        if not isinstance(system, str):
            raise FormatError("langchain: a separate system prompt must be a string")
        trajectory.messages.insert(0, Message(role="system", content=system))
    return trajectory


def _unwrap(body: dict[str, Any], system: Any, format: str) -> tuple[Any, Any]:
    """A request body's messages and system prompt (``system``, or Responses ``instructions``)."""
    key, system_key = ("input", "instructions") if format == "openai_responses" else ("messages", "system")
    if key not in body:
        raise FormatError(f"{format}: a request object needs {key!r}")
    inner = body.get(system_key)
    if inner is not None and system is not None:
        raise FormatError(f"{format}: give the system prompt in the request object or as an argument, not both")
    return body[key], inner if inner is not None else system


def from_trajectory(trajectory: Trajectory, format: FormatName) -> list[dict[str, Any]] | dict[str, Any]:
    """Write ``trajectory`` in ``format``: a message/item list, or for anthropic
    ``{"system": str | None, "messages": [...]}``."""
    _check(format)
    if format == "anthropic":
        return anthropic.write(trajectory)
    if format == "openai_chat":
        return openai_chat.write(trajectory)
    if format == "langchain":
        return langchain.write(trajectory)
    return openai_responses.write(trajectory)


def tool_call_from_openai(call: Any) -> ToolCall:
    """A :class:`ToolCall` from a Chat ``tool_calls`` entry or a Responses ``function_call`` item."""
    call = plain(call)
    if isinstance(call, dict) and call.get("type") == "function_call":
        return openai_responses.tool_call_from_openai(call)
    return openai_chat.tool_call_from_openai(call)


def tool_error_message(call_id: str, text: str, format: FormatName) -> dict[str, Any]:
    """The error tool result answering call ``call_id`` with ``text``, in ``format``."""
    _check(format)
    module = {
        "openai_chat": openai_chat,
        "openai_responses": openai_responses,
        "anthropic": anthropic,
        "langchain": langchain,
    }[format]
    return module.tool_error_message(call_id, text)
