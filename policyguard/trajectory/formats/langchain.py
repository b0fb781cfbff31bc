"""LangChain messages <-> :class:`Trajectory`: the fourth input format (``"langchain"``).

Reads a list of LangChain messages - ``SystemMessage``, ``HumanMessage``,
``AIMessage`` (with ``tool_calls``) and ``ToolMessage`` objects (their
``*Chunk`` variants too) - or their dict forms: a message's ``model_dump()``
(``{"type": "ai", "content": ..., "tool_calls": [...]}``), an entry of
``messages_to_dict`` (``{"type": "ai", "data": {...}}``) or of ``dumpd``
(``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}``).
No LangChain import is needed to read them.

As strict as the other readers, with LangChain's own fields:

- a tool call is ``{"name", "args", "id"}``: ``id`` and ``name`` non-empty
  strings, ``args`` a dict (a JSON string is refused: LangChain has already
  parsed it) within :mod:`policyguard.trajectory.limits`;
- a call id used by two calls, or answered by two ``ToolMessage``s, is refused
  naming both message indexes; a ``ToolMessage`` answering no earlier call is
  refused (results pair with calls by id, never by position);
- ``ToolMessage.status`` is ``"success"`` (the default when absent) or
  ``"error"``; anything else is refused. A result is a failure when its status is
  ``"error"`` or its text starts with ``"Error:"``;
- ``invalid_tool_calls`` (arguments LangChain could not parse; it never runs
  them and answers each with an error ``ToolMessage``) are kept as calls with no
  arguments whose answer must be an error: a success for a call that never ran
  is refused;
- ``ChatMessage`` with a free-form role, legacy ``FunctionMessage`` and
  ``RemoveMessage`` are refused.

``content`` may be a string or a list of strings and content blocks; text blocks
are joined one per line, other blocks (images, reasoning, provider tool-use
blocks) become ``[type]`` placeholders: the calls come from ``tool_calls``, the
list LangChain's tool node executes.

Canonical form (what :func:`write` produces and round-trips exactly): the
``messages_to_dict`` shape, which ``langchain_core.messages.messages_from_dict``
turns back into message objects.
"""

from __future__ import annotations

import sys
from typing import Any

from policyguard.errors import FormatError

from ..messages import Message, Role, ToolCall, Trajectory
from .common import (
    CallIds,
    as_dict,
    as_list,
    join_text,
    optional_str,
    parse_arguments,
    plain,
    require_str,
    says_error,
)

_TYPES: dict[str, Role] = {
    "system": "system",
    "human": "user",
    "ai": "assistant",
    "tool": "tool",
    "SystemMessageChunk": "system",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "ToolMessageChunk": "tool",
}
_CLASSES: dict[str, str] = {
    "SystemMessage": "system",
    "HumanMessage": "human",
    "AIMessage": "ai",
    "ToolMessage": "tool",
    "SystemMessageChunk": "SystemMessageChunk",
    "HumanMessageChunk": "HumanMessageChunk",
    "AIMessageChunk": "AIMessageChunk",
    "ToolMessageChunk": "ToolMessageChunk",
}
_WRITE_TYPES: dict[Role, str] = {"system": "system", "user": "human", "assistant": "ai", "tool": "tool"}
_TEXT_PARTS = {"text": "text"}
_STATUSES = ("success", "error")


def is_langchain_input(messages: Any) -> bool:
    """Whether ``messages`` is a non-empty list of LangChain message objects, or an agent state
    ``{"messages": [...]}`` holding one (never guessed from dicts).

    A list mixing LangChain message objects with anything else raises
    :class:`FormatError`. LangChain is not imported: when ``langchain_core`` is
    not loaded, no object can be one of its messages.
    """
    module = sys.modules.get("langchain_core.messages")
    if isinstance(messages, dict):
        messages = messages.get("messages")
    if module is None or not isinstance(messages, (list, tuple)) or not messages:
        return False
    base = module.BaseMessage
    kinds = [isinstance(item, base) for item in messages]
    if all(kinds):
        return True
    if any(kinds):
        other = kinds.index(False)
        kind = type(messages[other]).__name__
        raise FormatError(f"message {other}: a list of LangChain messages mixed with a {kind}")
    return False


_FIELDS = ("type", "content", "name", "tool_calls", "invalid_tool_calls", "tool_call_id", "status")


def _fields(item: Any, where: str) -> dict[str, Any]:
    """The fields the reader uses, from a message object (read directly, far cheaper than
    ``model_dump``) or from any of its dict forms, with ``type`` set."""
    module = sys.modules.get("langchain_core.messages")
    if module is not None and isinstance(item, module.BaseMessage):
        declared = type(item).model_fields
        values = {key: getattr(item, key) for key in _FIELDS if key in declared}
        return {key: plain(value) for key, value in values.items() if value is not None}
    item = as_dict(plain(item), where)
    if item.get("lc") is not None:
        if item.get("type") != "constructor":
            raise FormatError(f"{where}: a serialized LangChain object must have type 'constructor'")
        path = as_list(item.get("id"), f"{where}: 'id'")
        cls = path[-1] if path and isinstance(path[-1], str) else None
        kind = _CLASSES.get(cls or "")
        if kind is None:
            raise FormatError(f"{where}: unsupported LangChain message class {cls!r}")
        fields = dict(as_dict(item.get("kwargs", {}), f"{where}: 'kwargs'"))
        if fields.get("type", kind) != kind:
            raise FormatError(f"{where}: class {cls} with type {fields['type']!r}")
        fields["type"] = kind
        return fields
    if "data" in item and set(item) <= {"type", "data"}:
        fields = dict(as_dict(item["data"], f"{where}: 'data'"))
        if fields.get("type", item.get("type")) != item.get("type"):
            raise FormatError(f"{where}: type {item.get('type')!r} with data of type {fields['type']!r}")
        fields["type"] = item.get("type")
        return fields
    return item


def _content(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    parts = as_list(value, f"{where}: 'content'")
    blocks = [{"type": "text", "text": part} if isinstance(part, str) else part for part in parts]
    return join_text(blocks, where, _TEXT_PARTS)


def tool_call_from_langchain(call: Any, *, where: str = "tool call") -> ToolCall:
    """A :class:`ToolCall` from one entry of ``AIMessage.tool_calls`` (or a tool node's ``request.tool_call``)."""
    call = as_dict(plain(call), where)
    call_id = require_str(call, "id", where)
    name = require_str(call, "name", f"{where}: call {call_id!r}")
    kind = call.get("type", "tool_call")
    if kind != "tool_call":
        raise FormatError(f"{where}: call {call_id!r}: unsupported tool call type {kind!r}")
    args = call.get("args", {})
    if not isinstance(args, dict):
        raise FormatError(f"{where}: call {call_id!r}: 'args' must be an object, got {type(args).__name__}")
    return ToolCall(id=call_id, name=name, arguments=parse_arguments(args, where, call_id))


def _invalid_call(call: Any, where: str) -> ToolCall:
    """An ``invalid_tool_calls`` entry as a call with no arguments (LangChain never runs it)."""
    call = as_dict(call, where)
    call_id = require_str(call, "id", f"{where}: invalid tool call")
    name = call.get("name")
    return ToolCall(id=call_id, name=name if isinstance(name, str) and name else "unknown")


def read_message(item: Any, index: int) -> tuple[Message, set[str]]:
    """One message as a :class:`Message`, and the ids of its invalid tool calls."""
    where = f"message {index}"
    fields = _fields(item, where)
    kind = fields.get("type")
    role = _TYPES.get(kind) if isinstance(kind, str) else None
    if role is None:
        raise FormatError(
            f"{where}: unsupported LangChain message type {kind!r}; expected system, human, ai or tool messages"
        )
    content = _content(fields.get("content"), where)
    out: dict[str, Any] = {"role": role, "content": content, "name": optional_str(fields, "name", where)}
    invalid: set[str] = set()
    if role != "assistant" and (fields.get("tool_calls") or fields.get("invalid_tool_calls")):
        raise FormatError(f"{where}: only AI messages can carry 'tool_calls'")
    if role != "tool" and fields.get("tool_call_id") is not None:
        raise FormatError(f"{where}: only tool messages can carry 'tool_call_id'")
    if role == "assistant":
        calls = [
            tool_call_from_langchain(call, where=where)
            for call in as_list(fields.get("tool_calls") or [], f"{where}: 'tool_calls'")
        ]
        for call in as_list(fields.get("invalid_tool_calls") or [], f"{where}: 'invalid_tool_calls'"):
            calls.append(_invalid_call(call, where))
            invalid.add(calls[-1].id)
        out["tool_calls"] = calls
    elif role == "tool":
        out["tool_call_id"] = require_str(fields, "tool_call_id", where)
        status = fields.get("status")
        status = "success" if status is None else status  # absent or None: LangChain's default
        if status not in _STATUSES:
            raise FormatError(f"{where}: 'status' must be 'success' or 'error', got {status!r}")
        out["is_error"] = status == "error" or says_error(content)
    return Message(**out), invalid


def read(messages: Any) -> Trajectory:
    """A :class:`Trajectory` from a list of LangChain messages or their dict forms."""
    if not isinstance(messages, (list, tuple)):
        raise FormatError(f"langchain messages: expected a list, got {type(messages).__name__}")
    items = messages
    ids = CallIds()
    invalid: set[str] = set()
    out: list[Message] = []
    for index, item in enumerate(items):
        message, never_ran = read_message(item, index)
        for call in message.tool_calls:
            ids.call(call.id, index)
        invalid |= never_ran
        answered = message.tool_call_id
        if answered is not None:
            if answered not in ids.calls:
                raise FormatError(f"message {index}: tool message answers {answered!r}, which no earlier call made")
            if answered in invalid and not message.is_error:
                raise FormatError(
                    f"message {index}: call {answered!r} had unreadable arguments and never ran; "
                    "its answer must be an error"
                )
            ids.result(answered, index)
        out.append(message)
    return Trajectory(messages=out)


def write_message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"type": _WRITE_TYPES[message.role], "content": message.content or ""}
    if message.name is not None:
        data["name"] = message.name
    if message.role == "assistant":
        data["tool_calls"] = [
            {"name": call.name, "args": call.arguments, "id": call.id, "type": "tool_call"}
            for call in message.tool_calls
        ]
    if message.role == "tool":
        data["tool_call_id"] = message.tool_call_id
        data["status"] = "error" if message.is_error else "success"
    return {"type": data["type"], "data": data}


def write(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory in the ``messages_to_dict`` shape (canonical form)."""
    return [write_message(message) for message in trajectory.messages]


def tool_error_message(call_id: str, text: str, name: str | None = None) -> dict[str, Any]:
    """The error ``ToolMessage`` (``messages_to_dict`` shape) answering a blocked call with ``text``."""
    data: dict[str, Any] = {"type": "tool", "content": text, "tool_call_id": call_id, "status": "error"}
    if name is not None:
        data["name"] = name
    return {"type": "tool", "data": data}
