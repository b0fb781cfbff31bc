"""Helpers shared by the format readers: plain data, argument parsing, text joining.

Readers are strict where it matters for a guard: a call whose arguments cannot
be parsed, or a message that cannot be read, raises :class:`FormatError` naming
the message index instead of being skipped, because a skipped call is a call
nobody checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import FormatError


def plain(value: Any) -> Any:
    """``value`` as plain dicts and lists, turning provider SDK objects into dicts.

    The OpenAI and Anthropic SDKs return pydantic objects (``ChatCompletionMessage``,
    ``ToolUseBlock``...), often nested inside hand-written dicts; fields set to
    ``None`` are dropped, as the readers treat a missing key and ``None`` alike.
    """
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return plain(value.model_dump(exclude_none=True))
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def as_dict(value: Any, where: str) -> dict[str, Any]:
    """``value`` itself when it is a dict, else a :class:`FormatError` about ``where``."""
    if not isinstance(value, dict):
        raise FormatError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise FormatError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def require_str(item: Mapping[str, Any], key: str, where: str) -> str:
    """``item[key]`` when it is a non-empty string; ids and names must never be blank."""
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise FormatError(f"{where}: missing or empty {key!r}")
    return value


def parse_arguments(raw: Any, where: str, call_id: str) -> dict[str, Any]:
    """A call's arguments as a dict: a JSON-object string is parsed, a dict is kept.

    An empty string means no arguments. Anything else (invalid JSON, a JSON
    array or number) raises naming the message and the call id.
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise FormatError(f"{where}: call {call_id!r}: arguments are not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise FormatError(f"{where}: call {call_id!r}: arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def dump_arguments(arguments: Mapping[str, Any]) -> str:
    """Arguments as the JSON string OpenAI sends (default separators, non-ASCII kept)."""
    return json.dumps(arguments, ensure_ascii=False)


def join_text(parts: Iterable[Any], where: str, text_types: Mapping[str, str]) -> str:
    """The text of a list of content parts, one part per line.

    ``text_types`` maps a part type to the key holding its text (``{"text": "text"}``).
    Parts without text (images, files, audio) become a ``[type]`` placeholder so
    the dialogue still shows that something was sent.
    """
    lines: list[str] = []
    for position, part in enumerate(parts):
        part = as_dict(part, f"{where}, content part {position}")
        kind = part.get("type")
        if not isinstance(kind, str):
            raise FormatError(f"{where}, content part {position}: missing 'type'")
        key = text_types.get(kind)
        if key is None:
            lines.append(f"[{kind}]")
            continue
        text = part.get(key)
        if not isinstance(text, str):
            raise FormatError(f"{where}, content part {position}: {kind!r} part without a {key!r} string")
        lines.append(text)
    return "\n".join(lines)
