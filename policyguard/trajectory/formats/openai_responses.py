"""OpenAI Responses API input/output items <-> :class:`Trajectory`.

Reads a list of items (dicts or SDK objects), or a bare string (a single user
turn, as ``input="..."`` allows):

- messages, with or without ``"type": "message"``; list content joins
  ``input_text``/``output_text``/``refusal`` parts one per line, other parts
  (images, files) become ``[input_image]``-style placeholders; ``developer`` is
  read as ``system``;
- ``function_call`` items join the assistant turn right before them (or start
  one); ``call_id`` becomes :attr:`ToolCall.id`, the item's own ``id`` is dropped;
- ``function_call_output`` items become ``role="tool"`` messages.

``reasoning`` items are dropped: they are the model's private scratchpad, carry
no dialogue, and are not needed to judge a call. Any other item type (hosted
tool calls, ``item_reference``...) raises :class:`FormatError` rather than
being silently skipped.

A ``call_id`` used by two ``function_call`` items, or answered by two
``function_call_output`` items, raises naming both item indexes; so do
arguments that are not a JSON object or break :mod:`policyguard.trajectory.limits`.

Failed tool results: Responses has no error flag on ``function_call_output``,
so an output is read as a failure (``is_error=True``) when its text starts with
``"Error:"`` (tau2's environment, :class:`policyguard.GuardedTools` and this
writer mark failures that way), when its ``status`` is ``"incomplete"`` or
``"in_progress"`` (not a finished result), or when it carries the
non-standard key ``"is_error": true``. ``status`` must be one of the API's
three strings and ``is_error`` a JSON bool; anything else raises rather than
being guessed. A failure the text does not already mark is written as
``"Error: <text>"``.

Canonical form (what :func:`write` produces and round-trips exactly): every
message as ``{"role", "content": str}``, an assistant turn's calls as
``function_call`` items right after its text (if any), failed outputs starting
with ``"Error:"``. Responses has no name on messages, so ``Message.name`` is
not written.
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
    parse_arguments,
    plain,
    require_str,
    says_error,
)

_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
DROPPED_TYPES = frozenset({"reasoning"})
_STATUS_FAILED = {"completed": False, "incomplete": True, "in_progress": True}


def tool_call_from_openai(item: Any, *, where: str = "function_call item") -> ToolCall:
    """A :class:`ToolCall` from a ``function_call`` item; its ``call_id`` is the call's id."""
    return _tool_call(plain(item), where)


def _tool_call(item: Any, where: str) -> ToolCall:
    item = as_dict(item, where)
    if item.get("type", "function_call") != "function_call":
        raise FormatError(f"{where}: expected a 'function_call' item, got {item.get('type')!r}")
    call_id = require_str(item, "call_id", where)
    name = require_str(item, "name", f"{where}: call {call_id!r}")
    return ToolCall(id=call_id, name=name, arguments=parse_arguments(item.get("arguments"), where, call_id))


def tool_error_message(call_id: str, text: str) -> dict[str, Any]:
    """The ``function_call_output`` item that answers a blocked call with ``text``."""
    return {"type": "function_call_output", "call_id": call_id, "output": error_text(text, True)}


def _text(value: Any, where: str, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return join_text(as_list(value, f"{where}: {key!r}"), where, _TEXT_PARTS)


def _output_failed(item: dict[str, Any], text: str | None, where: str) -> bool:
    """Whether a ``function_call_output`` reports a failure (see the module docstring)."""
    status = item.get("status")
    if status is not None and (not isinstance(status, str) or status not in _STATUS_FAILED):
        raise FormatError(f"{where}: 'status' must be one of {', '.join(_STATUS_FAILED)}, got {status!r}")
    flagged = error_flag(item.get("is_error"), where)
    return flagged or (status is not None and _STATUS_FAILED[status]) or says_error(text)


def read(items: Any) -> Trajectory:
    """A :class:`Trajectory` from Responses input/output items (or a bare string)."""
    return read_plain(plain(items))


def read_plain(items: Any) -> Trajectory:
    """:func:`read` for items already through :func:`plain` (no SDK objects left), which are not copied again."""
    if isinstance(items, str):
        return Trajectory(messages=[Message(role="user", content=items)])
    messages: list[Message] = []
    ids = CallIds("item")
    open_turn = False  # the last message is an assistant turn that later function_calls join
    for index, raw in enumerate(as_list(items, "openai_responses items")):
        where = f"item {index}"
        item = as_dict(raw, where)
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise FormatError(f"{where}: unsupported item type {kind!r} for openai_responses")
        if kind in DROPPED_TYPES:
            continue
        if kind == "message":
            raw_role = item.get("role")
            role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
            if role is None:
                raise FormatError(f"{where}: unknown role {raw_role!r} for openai_responses")
            messages.append(Message(role=role, content=_text(item.get("content"), where, "content")))
            open_turn = role == "assistant"
        elif kind == "function_call":
            call = _tool_call(item, where)
            ids.call(call.id, index)
            if open_turn:
                messages[-1].tool_calls.append(call)
            else:
                messages.append(Message(role="assistant", tool_calls=[call]))
                open_turn = True
        elif kind == "function_call_output":
            call_id = require_str(item, "call_id", where)
            ids.result(call_id, index)
            text = _text(item.get("output"), where, "output")
            failed = _output_failed(item, text, where)
            messages.append(Message(role="tool", tool_call_id=call_id, content=text, is_error=failed))
            open_turn = False
        else:
            raise FormatError(f"{where}: unsupported item type {kind!r} for openai_responses")
    return Trajectory(messages=messages)


def write(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory as Responses input items (canonical form)."""
    items: list[dict[str, Any]] = []
    for message in trajectory.messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": error_text(message.content, message.is_error),
                }
            )
            continue
        if message.content is not None or not message.tool_calls:
            items.append({"role": message.role, "content": message.content or ""})
        for call in message.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": dump_arguments(call.arguments),
                }
            )
    return items
