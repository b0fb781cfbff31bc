"""OpenAI Chat Completions messages <-> :class:`Trajectory`.

Reads a list of ``system``/``developer``/``user``/``assistant``/``tool`` messages
(dicts or SDK objects). ``developer`` is read as ``system``; list content is
joined one part per line, with ``[image_url]``-style placeholders for non-text
parts. Legacy ``function_call``/``function`` messages and non-function tool
calls raise :class:`FormatError`: the guard must see every call it lets through.

Canonical form (what :func:`write` produces and round-trips exactly): string
content, assistant messages always carry ``content`` (``None`` when they only
call tools) and ``tool_calls`` only when there are some, arguments as
``json.dumps`` strings. Chat has no error flag on tool results, so
``Message.is_error`` is not written.
"""

from __future__ import annotations

from typing import Any

from ..errors import FormatError
from ..messages import Message, Role, ToolCall, Trajectory
from ._common import as_dict, as_list, dump_arguments, join_text, parse_arguments, plain, require_str

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_TEXT_PARTS = {"text": "text", "refusal": "refusal"}


def tool_call_from_openai(call: Any, *, where: str = "tool call") -> ToolCall:
    """A :class:`ToolCall` from one entry of an assistant message's ``tool_calls``."""
    call = as_dict(plain(call), where)
    call_id = require_str(call, "id", where)
    kind = call.get("type", "function")
    if kind != "function":
        raise FormatError(f"{where}: call {call_id!r}: unsupported tool call type {kind!r}")
    function = as_dict(call.get("function"), f"{where}: call {call_id!r}: 'function'")
    name = require_str(function, "name", f"{where}: call {call_id!r}")
    return ToolCall(id=call_id, name=name, arguments=parse_arguments(function.get("arguments"), where, call_id))


def tool_call_to_openai(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": dump_arguments(call.arguments)},
    }


def tool_error_message(call_id: str, text: str) -> dict[str, Any]:
    """The tool message that answers a blocked call with the remediation ``text``."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _content(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return join_text(as_list(value, f"{where}: 'content'"), where, _TEXT_PARTS)


def read_message(item: Any, index: int) -> Message:
    """One chat message as a :class:`Message`; ``index`` is only used in errors."""
    where = f"message {index}"
    item = as_dict(plain(item), where)
    role = _ROLES.get(item.get("role"))
    if role is None:
        raise FormatError(f"{where}: unknown role {item.get('role')!r} for openai_chat")
    if item.get("function_call") is not None:
        raise FormatError(f"{where}: legacy 'function_call' is not supported; use 'tool_calls'")
    content = _content(item.get("content"), where)
    if role == "assistant" and content is None and isinstance(item.get("refusal"), str):
        content = item["refusal"]
    fields: dict[str, Any] = {"role": role, "content": content, "name": item.get("name")}
    if item.get("tool_calls") and role != "assistant":
        raise FormatError(f"{where}: only assistant messages can carry 'tool_calls'")
    if role == "assistant":
        calls = as_list(item.get("tool_calls") or [], f"{where}: 'tool_calls'")
        fields["tool_calls"] = [tool_call_from_openai(call, where=where) for call in calls]
    elif role == "tool":
        fields["tool_call_id"] = require_str(item, "tool_call_id", where)
    return Message(**fields)


def read(messages: Any) -> Trajectory:
    """A :class:`Trajectory` from a Chat Completions message list."""
    items = as_list(plain(messages), "openai_chat messages")
    return Trajectory(messages=[read_message(item, index) for index, item in enumerate(items)])


def write_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["content"] = message.content or ""
    else:
        out["content"] = message.content
    if message.tool_calls:
        out["tool_calls"] = [tool_call_to_openai(call) for call in message.tool_calls]
    if message.name is not None:
        out["name"] = message.name
    return out


def write(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory as a Chat Completions message list (canonical form)."""
    return [write_message(message) for message in trajectory.messages]
