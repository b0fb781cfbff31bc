"""Tell which provider format a message list is in.

Each item narrows the set of formats it could belong to (a ``tool`` role is
Chat only, a ``tool_use`` block is Anthropic only, a ``function_call`` item is
Responses only...). The answer is the one format every item allows; when
several remain (a plain text exchange reads the same everywhere) or none does
(items from two formats mixed), :class:`FormatError` says so instead of
guessing.
"""

from __future__ import annotations

from typing import Any

from policyguard.errors import FormatError

from .common import plain

CHAT, RESPONSES, ANTHROPIC = "openai_chat", "openai_responses", "anthropic"
FORMATS = (CHAT, RESPONSES, ANTHROPIC)
ALL = frozenset(FORMATS)
_ONLY_CHAT = frozenset({CHAT})
_ONLY_RESPONSES = frozenset({RESPONSES})
_TYPED_MESSAGE = frozenset({RESPONSES, ANTHROPIC})  # a {"type": "message"} item

_ROLE_FORMATS = {
    "system": frozenset({CHAT, RESPONSES}),
    "developer": frozenset({CHAT, RESPONSES}),
    "tool": frozenset({CHAT}),
    "user": ALL,
    "assistant": ALL,
}
_PART_FORMATS = {
    "text": frozenset({CHAT, ANTHROPIC}),
    "refusal": frozenset({CHAT, RESPONSES}),
    "image_url": frozenset({CHAT}),
    "input_audio": frozenset({CHAT}),
    "file": frozenset({CHAT}),
    "input_text": frozenset({RESPONSES}),
    "output_text": frozenset({RESPONSES}),
    "input_image": frozenset({RESPONSES}),
    "input_file": frozenset({RESPONSES}),
    "tool_use": frozenset({ANTHROPIC}),
    "tool_result": frozenset({ANTHROPIC}),
    "image": frozenset({ANTHROPIC}),
    "document": frozenset({ANTHROPIC}),
    "thinking": frozenset({ANTHROPIC}),
    "redacted_thinking": frozenset({ANTHROPIC}),
}


def _item_formats(item: Any, index: int) -> frozenset[str]:
    """The formats ``item`` (at ``index``) could belong to."""
    if not isinstance(item, dict):
        raise FormatError(f"message {index}: expected an object, got {type(item).__name__}")
    kind = item.get("type")
    if kind is not None and kind != "message":
        return _ONLY_RESPONSES  # only Responses items carry a non-message "type"
    formats = _TYPED_MESSAGE if kind == "message" else ALL
    role = item.get("role")
    if not isinstance(role, str) or role not in _ROLE_FORMATS:
        raise FormatError(f"message {index}: no 'role' or 'type' any format knows (role={role!r}, type={kind!r})")
    formats &= _ROLE_FORMATS[role]
    if "tool_calls" in item or "tool_call_id" in item or "function_call" in item:
        formats &= _ONLY_CHAT
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            part_type = part.get("type") if isinstance(part, dict) else None
            if isinstance(part_type, str):
                formats &= _PART_FORMATS.get(part_type, ALL)
    return formats


def candidates(messages: Any) -> frozenset[str]:
    """The formats every item of the list ``messages`` fits; FormatError if none does."""
    if not isinstance(messages, list):
        raise FormatError(f"cannot detect format: expected a list of messages, got {type(messages).__name__}")
    possible = ALL
    for index, item in enumerate(messages):
        possible = narrow(possible, item, index)
    return possible


def narrow(possible: frozenset[str], item: Any, index: int) -> frozenset[str]:
    """The formats of ``possible`` (what the messages before ``index`` fit) that ``item`` fits too;
    FormatError if none."""
    fits = _item_formats(item, index)
    if not fits:
        raise FormatError(f"cannot detect format: message {index} mixes features of different formats")
    narrowed = possible & fits
    if not narrowed:
        raise FormatError(
            f"cannot detect format: message {index} fits {_names(fits)} "
            f"but earlier messages fit {_names(possible)}; are formats mixed?"
        )
    return narrowed


def choose(possible: frozenset[str], *, separate_system: bool = False) -> str:
    """The one format in ``possible``; a separate system prompt settles a tie for Anthropic."""
    if len(possible) > 1 and separate_system and ANTHROPIC in possible:
        return ANTHROPIC
    if len(possible) > 1:
        raise FormatError(
            f"cannot detect format: the messages read alike as {_names(possible)}; pass format= explicitly"
        )
    return next(iter(possible))


def detect_format(messages: Any) -> str:
    """``"openai_chat"``, ``"openai_responses"`` or ``"anthropic"``; FormatError if unclear.

    Takes a message/item list, a bare string (a Responses ``input``) or a
    request body: ``{"input": ...}`` is Responses; ``{"messages": [...]}`` is
    judged by its messages, a top-level ``system`` settling a tie for Anthropic
    (Chat keeps system text inside the messages). An empty list, a list every
    format reads alike, or a list mixing formats raises.
    """
    return detect_plain(plain(messages))


def detect_plain(messages: Any) -> str:
    """:func:`detect_format` for data already through :func:`plain`, which is not copied again."""
    if isinstance(messages, str):
        return RESPONSES
    separate_system = False
    if isinstance(messages, dict):
        if "input" in messages:
            return RESPONSES
        if "messages" not in messages:
            raise FormatError("cannot detect format: a request object needs 'messages' (Chat, Anthropic) or 'input'")
        separate_system = "system" in messages
        messages = messages["messages"]
    if messages == [] and not separate_system:
        raise FormatError("cannot detect format of an empty message list; pass format= explicitly")
    return choose(candidates(messages), separate_system=separate_system)


def _names(formats: frozenset[str]) -> str:
    return ", ".join(name for name in FORMATS if name in formats)
