"""OpenAI Chat Completions messages <-> :class:`Trajectory`.

Reads a list of ``system``/``developer``/``user``/``assistant``/``tool`` messages
(dicts or SDK objects). ``developer`` is read as ``system``; list content is
joined one part per line, with ``[image_url]``-style placeholders for non-text
parts. Legacy ``function_call``/``function`` messages and non-function tool
calls raise :class:`FormatError`: the guard must see every call it lets through.

A call id used by two calls, or answered by two ``tool`` messages, raises
naming both message indexes; so do arguments that are not a JSON object or
break :mod:`policyguard.trajectory.limits` (``NaN``, ``Infinity``, ``1e999``, integers
beyond 64 bits, too deep).

Failed tool results: Chat has no error flag, so a ``tool`` message is read as a
failure (``is_error=True``) when its text starts with ``"Error:"`` (tau2's
environment, :class:`policyguard.GuardedTools` and this writer mark failures
that way) or when it carries the non-standard key ``"is_error": true`` (some
bridges from MCP or Anthropic keep it). ``is_error`` must then be a JSON bool:
``"false"``, ``0`` or ``1`` raise rather than being guessed. A failure the text
does not already mark is written as ``"Error: <text>"``, so the flag
round-trips through the API-valid message shape.

Canonical form (what :func:`write` produces and round-trips exactly): string
content, assistant messages always carry ``content`` (``None`` when they only
call tools) and ``tool_calls`` only when there are some, arguments as
``json.dumps`` strings, failed results' content starting with ``"Error:"``.
"""

from __future__ import annotations

from typing import Any

from policyguard.errors import FormatError

from ..messages import Message, Role, ToolCall, Trajectory
from .common import (
    CallIds,
    as_dict,
    as_list,
    dump_arguments,
    error_flag,
    error_text,
    join_text,
    optional_str,
    parse_arguments,
    plain,
    require_str,
    says_error,
)

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_TEXT_PARTS = {"text": "text", "refusal": "refusal"}


def tool_call_from_openai(call: Any, *, where: str = "tool call", unreadable: dict[str, str] | None = None) -> ToolCall:
    """A :class:`ToolCall` from one entry of an assistant message's ``tool_calls``.

    With ``unreadable`` (for histories that keep calls the guard refused), a
    call whose arguments cannot be read gets empty arguments and its id is
    recorded there with the reason, instead of raising.
    """
    return _tool_call(plain(call), where, unreadable)


def _tool_call(call: Any, where: str, unreadable: dict[str, str] | None) -> ToolCall:
    call = as_dict(call, where)
    call_id = require_str(call, "id", where)
    kind = call.get("type", "function")
    if kind != "function":
        raise FormatError(f"{where}: call {call_id!r}: unsupported tool call type {kind!r}")
    function = as_dict(call.get("function"), f"{where}: call {call_id!r}: 'function'")
    name = require_str(function, "name", f"{where}: call {call_id!r}")
    try:
        arguments = parse_arguments(function.get("arguments"), where, call_id)
    except FormatError as exc:
        if unreadable is None:
            raise
        unreadable[call_id] = str(exc)
        arguments = {}
    return ToolCall(id=call_id, name=name, arguments=arguments)


def tool_call_to_openai(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": dump_arguments(call.arguments)},
    }


def tool_error_message(call_id: str, text: str) -> dict[str, Any]:
    """The tool message that answers a blocked call with the remediation ``text`` (``"Error: ..."``)."""
    return {"role": "tool", "tool_call_id": call_id, "content": error_text(text, True)}


def _content(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return join_text(as_list(value, f"{where}: 'content'"), where, _TEXT_PARTS)


def read_message(item: Any, index: int, *, unreadable: dict[str, str] | None = None) -> Message:
    """One chat message as a :class:`Message`; ``index`` is only used in errors.

    ``unreadable`` is passed to :func:`tool_call_from_openai`.
    """
    return read_plain_message(plain(item), index, unreadable=unreadable)


def read_plain_message(item: Any, index: int, *, unreadable: dict[str, str] | None = None) -> Message:
    """:func:`read_message` for an item already through :func:`plain`, which is not copied again."""
    where = f"message {index}"
    item = as_dict(item, where)
    raw_role = item.get("role")
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        raise FormatError(f"{where}: unknown role {raw_role!r} for openai_chat")
    if item.get("function_call") is not None:
        raise FormatError(f"{where}: legacy 'function_call' is not supported; use 'tool_calls'")
    content = _content(item.get("content"), where)
    if role == "assistant" and content is None and isinstance(item.get("refusal"), str):
        content = item["refusal"]
    fields: dict[str, Any] = {"role": role, "content": content, "name": optional_str(item, "name", where)}
    if item.get("tool_calls") and role != "assistant":
        raise FormatError(f"{where}: only assistant messages can carry 'tool_calls'")
    if role == "assistant":
        calls = as_list(item.get("tool_calls") or [], f"{where}: 'tool_calls'")
        fields["tool_calls"] = [_tool_call(call, where, unreadable) for call in calls]
    elif role == "tool":
        fields["tool_call_id"] = require_str(item, "tool_call_id", where)
        fields["is_error"] = error_flag(item.get("is_error"), where) or says_error(content)
    return Message(**fields)


def check_message(message: Message, index: int, ids: CallIds) -> None:
    """Record ``message``'s call ids and result id in ``ids``; a reuse raises."""
    for call in message.tool_calls:
        ids.call(call.id, index)
    if message.tool_call_id is not None:
        ids.result(message.tool_call_id, index)


def read(messages: Any) -> Trajectory:
    """A :class:`Trajectory` from a Chat Completions message list."""
    return read_plain(plain(messages))


def read_plain(messages: Any) -> Trajectory:
    """:func:`read` for a list already through :func:`plain` (no SDK objects left), which is not copied again."""
    items = as_list(messages, "openai_chat messages")
    ids = CallIds()
    out: list[Message] = []
    for index, item in enumerate(items):
        message = read_plain_message(item, index)
        check_message(message, index, ids)
        out.append(message)
    return Trajectory(messages=out)


def write_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["content"] = error_text(message.content, message.is_error)
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
