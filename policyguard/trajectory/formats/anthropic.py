"""Anthropic Messages <-> :class:`Trajectory`.

Reads either a message list plus an optional ``system`` (a string or a list of
text blocks), or a request-like dict ``{"system": ..., "messages": [...]}``
(other keys such as ``model`` or ``tools`` are ignored). Messages and blocks may
be dicts or SDK objects.

- An assistant message's ``text`` blocks are joined one per line into its
  content and its ``tool_use`` blocks become its calls; ``thinking`` and
  ``redacted_thinking`` blocks are dropped (private reasoning, no dialogue).
- A user message is split in block order: each ``tool_result`` becomes a
  ``role="tool"`` message (keeping ``is_error``), each run of other blocks one
  ``role="user"`` message (images and documents as ``[image]`` placeholders).
- Any other block type (server tools, ...) raises :class:`FormatError`, and so
  do a ``tool_use`` id used twice, two ``tool_result`` blocks for one id (both
  message indexes are named) and ``input`` that breaks
  :mod:`policyguard.trajectory.limits` (``NaN``, ``Infinity``, integers beyond 64 bits,
  too deep).

Failed tool results: a ``tool_result`` is read as a failure when ``is_error`` is
``true`` or when its text starts with ``"Error:"`` (tau2's environment and
:class:`policyguard.GuardedTools` mark failures that way; litellm drops the flag
when it converts Chat messages). ``is_error`` must be a JSON bool or absent:
``"false"`` (a string), ``0`` or ``1`` raise rather than being guessed.

Canonical form (what :func:`write` produces and round-trips exactly): ``system``
a string or ``None``; assistant content always a block list (text first, then
``tool_use``); a user message holding one text is a plain string, otherwise a
block list; ``tool_result`` content a string, ``is_error`` only when true. Tool
results and the user text next to them share one user message. Anthropic has no
``name`` on messages, so ``Message.name`` is not written, and system messages
must all come first.
"""

from __future__ import annotations

from typing import Any

from policyguard.errors import FormatError

from ..messages import Message, ToolCall, Trajectory
from .common import CallIds, as_dict, as_list, error_flag, join_text, parse_arguments, plain, require_str, says_error

_TEXT_BLOCKS = {"text": "text"}
_PLACEHOLDER_BLOCKS = frozenset({"image", "document"})
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def tool_call_from_anthropic(block: Any, *, where: str = "tool_use block") -> ToolCall:
    """A :class:`ToolCall` from a ``tool_use`` block; ``input`` must be an object."""
    return _tool_call(plain(block), where)


def _tool_call(block: Any, where: str) -> ToolCall:
    block = as_dict(block, where)
    if block.get("type", "tool_use") != "tool_use":
        raise FormatError(f"{where}: expected a 'tool_use' block, got {block.get('type')!r}")
    call_id = require_str(block, "id", where)
    name = require_str(block, "name", f"{where}: call {call_id!r}")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise FormatError(f"{where}: call {call_id!r}: 'input' must be an object, got {type(arguments).__name__}")
    return ToolCall(id=call_id, name=name, arguments=parse_arguments(arguments, where, call_id))


def tool_error_message(call_id: str, text: str) -> dict[str, Any]:
    """The user message whose ``tool_result`` (``is_error: true``) answers a blocked call."""
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": True}],
    }


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [as_dict(block, f"{where}, block {i}") for i, block in enumerate(as_list(content, f"{where}: 'content'"))]


def _read_assistant(content: Any, where: str, index: int, ids: CallIds) -> Message:
    texts: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(_blocks(content, where)):
        kind = block.get("type")
        if kind == "text":
            texts.append(block)
        elif kind == "tool_use":
            call = _tool_call(block, f"{where}, block {i}")
            ids.call(call.id, index)
            calls.append(call)
        elif not isinstance(kind, str) or kind not in DROPPED_BLOCKS:
            raise FormatError(f"{where}, block {i}: unsupported assistant block type {kind!r}")
    text = join_text(texts, where, _TEXT_BLOCKS) if texts else None
    return Message(role="assistant", content=text, tool_calls=calls)


def _read_tool_result(block: dict[str, Any], where: str) -> Message:
    call_id = require_str(block, "tool_use_id", where)
    content = block.get("content")
    if content is not None and not isinstance(content, str):
        content = join_text(as_list(content, f"{where}: 'content'"), where, _TEXT_BLOCKS)
    failed = error_flag(block.get("is_error"), where) or says_error(content)
    return Message(role="tool", tool_call_id=call_id, content=content, is_error=failed)


def _read_user(content: Any, where: str, index: int, ids: CallIds) -> list[Message]:
    if isinstance(content, str):
        return [Message(role="user", content=content)]
    out: list[Message] = []
    run: list[dict[str, Any]] = []
    for i, block in enumerate(_blocks(content, where)):
        kind = block.get("type")
        if kind == "tool_result":
            if run:
                out.append(Message(role="user", content=join_text(run, where, _TEXT_BLOCKS)))
                run = []
            result = _read_tool_result(block, f"{where}, block {i}")
            ids.result(result.tool_call_id or "", index)
            out.append(result)
        elif kind == "text" or (isinstance(kind, str) and kind in _PLACEHOLDER_BLOCKS):
            run.append(block)
        else:
            raise FormatError(f"{where}, block {i}: unsupported user block type {kind!r}")
    if run:
        out.append(Message(role="user", content=join_text(run, where, _TEXT_BLOCKS)))
    return out


def read(messages: Any, system: Any = None) -> Trajectory:
    """A :class:`Trajectory` from Anthropic messages (a list plus ``system``, or a request dict)."""
    return read_plain(plain(messages), plain(system))


def read_plain(messages: Any, system: Any = None) -> Trajectory:
    """:func:`read` for data already through :func:`plain` (no SDK objects left), which is not copied again."""
    if isinstance(messages, dict):
        if system is not None:
            raise FormatError("anthropic: give 'system' either inside the request dict or as an argument, not both")
        system = messages.get("system")
        messages = messages.get("messages")
    out: list[Message] = []
    if system is not None:
        text = (
            system
            if isinstance(system, str)
            else join_text(as_list(system, "anthropic system"), "system", _TEXT_BLOCKS)
        )
        out.append(Message(role="system", content=text))
    ids = CallIds()
    for index, raw in enumerate(as_list(messages, "anthropic messages")):
        where = f"message {index}"
        item = as_dict(raw, where)
        role = item.get("role")
        if role == "assistant":
            out.append(_read_assistant(item.get("content"), where, index, ids))
        elif role == "user":
            out.extend(_read_user(item.get("content"), where, index, ids))
        else:
            raise FormatError(f"{where}: unknown role {role!r} for anthropic (only 'user' and 'assistant')")
    return Trajectory(messages=out)


def _tool_result_block(message: Message) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    if message.content is not None:
        block["content"] = message.content
    if message.is_error:
        block["is_error"] = True
    return block


def _assistant(message: Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content is not None else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]
    return {"role": "assistant", "content": blocks}


def write(trajectory: Trajectory) -> dict[str, Any]:
    """``{"system": str | None, "messages": [...]}`` in canonical form.

    Consecutive tool results and user turns share one user message (a new one
    starts when a user turn follows another user turn, so reading it back gives
    the same messages).
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    user_blocks: list[dict[str, Any]] | None = None  # the open user message's blocks
    previous: str | None = None
    for index, message in enumerate(trajectory.messages):
        if message.role == "system":
            if messages or user_blocks is not None:
                raise FormatError(f"message {index}: anthropic takes system text only before the dialogue")
            system.append(message.content or "")
        elif message.role == "assistant":
            if user_blocks is not None:
                messages.append(_user(user_blocks))
                user_blocks = None
            messages.append(_assistant(message))
        else:
            if user_blocks is not None and message.role == "user" and previous == "user":
                messages.append(_user(user_blocks))
                user_blocks = None
            if user_blocks is None:
                user_blocks = []
            if message.role == "tool":
                user_blocks.append(_tool_result_block(message))
            else:
                user_blocks.append({"type": "text", "text": message.content or ""})
        previous = message.role
    if user_blocks is not None:
        messages.append(_user(user_blocks))
    return {"system": "\n\n".join(system) if system else None, "messages": messages}


def _user(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"role": "user", "content": blocks[0]["text"]}
    return {"role": "user", "content": blocks}
