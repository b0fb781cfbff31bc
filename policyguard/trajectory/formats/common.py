"""Helpers shared by the format readers: plain data, argument parsing, call ids, error flags.

Readers are strict where it matters for a guard: a call whose arguments cannot
be parsed or break the limits of :mod:`policyguard.trajectory.limits`, a call id used
twice, a second result for one call, an error flag of the wrong type, or a
message that cannot be read raises :class:`FormatError` naming the message
index instead of being skipped or guessed, because a skipped call is a call
nobody checked and a result paired by position is a fact about the wrong record.

A tool result is a failure when its format's flag says so (see each reader) or
when its text starts with ``"Error:"``, the convention of tau2's environment,
of :class:`policyguard.GuardedTools` and of the OpenAI writers here (OpenAI
formats have no error flag). Reading a success as a failure only removes a
fact, so the text rule errs on the closed side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from policyguard.errors import FormatError

from .. import strictjson
from ..limits import MAX_DEPTH, MAX_RESULT_CHARS, call_problem
from ..messages import Trajectory

ERROR_PREFIX = "Error:"


def plain(value: Any) -> Any:
    """``value`` as plain dicts and lists, turning provider SDK objects into dicts.

    The OpenAI and Anthropic SDKs return pydantic objects (``ChatCompletionMessage``,
    ``ToolUseBlock``...), often nested inside hand-written dicts; fields set to
    ``None`` are dropped, as the readers treat a missing key and ``None`` alike.
    Input nested too deeply for Python to walk raises :class:`FormatError`.
    """
    try:
        return _plain(value)
    except RecursionError:
        raise FormatError("the input is nested too deeply to read") from None


def _plain(value: Any) -> Any:
    # Exact dicts, lists and strings first: they are nearly all a dialogue holds. Checking the exact
    # type skips the isinstance chain, and a string item is kept without a call. Anything else
    # (subclasses, tuples, SDK objects) takes the general rules below, which decide every result.
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) is str else _plain(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) is str else _plain(item) for item in value]
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return _plain(value.model_dump(exclude_none=True))
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
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
    array or number) raises naming the message and the call id, and so do
    arguments that break the limits of :mod:`policyguard.trajectory.limits`: ``NaN``,
    ``Infinity``, numbers that overflow to infinity (``1e999``), integers
    beyond 64 bits, nesting deeper than ``MAX_DEPTH`` and too many values. The
    message names the argument, for the model to correct.
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        if len(raw) > MAX_RESULT_CHARS:
            raise FormatError(f"{where}: call {call_id!r}: arguments are over {MAX_RESULT_CHARS:,} characters")
        try:
            raw = strictjson.loads(raw)  # NaN and Infinity parse here so call_problem can name the argument
        except RecursionError:
            raise FormatError(f"{where}: call {call_id!r}: arguments nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise FormatError(f"{where}: call {call_id!r}: arguments are not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise FormatError(f"{where}: call {call_id!r}: arguments must be a JSON object, got {type(raw).__name__}")
    problem = call_problem(raw)
    if problem is not None:
        raise FormatError(f"{where}: call {call_id!r}: {problem}")
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


def error_flag(value: Any, where: str, key: str = "is_error") -> bool:
    """A result's error flag: absent or ``None`` is false, a bool is itself, anything else raises.

    ``"false"``, ``0`` or ``1`` are refused rather than guessed: a string
    ``"false"`` is truthy in Python, and a guessed flag decides whether a
    failed read stands as a fact.
    """
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FormatError(f"{where}: {key!r} must be true or false, got {value!r} ({type(value).__name__})")
    return value


def says_error(text: str | None) -> bool:
    """Whether a tool result's text marks a failure by the ``"Error:"`` convention."""
    return text is not None and text.lstrip().startswith(ERROR_PREFIX)


def error_text(text: str | None, is_error: bool) -> str:
    """A result's text for a format without an error flag: failures start with ``"Error:"``."""
    text = text or ""
    if is_error and not says_error(text):
        return f"{ERROR_PREFIX} {text}" if text else ERROR_PREFIX
    return text


class CallIds:
    """Each result answers the newest unanswered call of its id; anything ambiguous is refused.

    Pairing a result with its call goes by id. An id may be used again once the
    call that used it was answered (some serving stacks reuse ids that way):
    the next result then answers the new call. Two unanswered calls with one id
    (reads of two different records, say) or a second result for an answered
    call would make one record's data stand as the fact for another, so both
    are refused with the indexes of the two messages, never resolved by position.
    """

    def __init__(self, label: str = "message", *, reuse_after_answer: bool = True) -> None:
        self.label = label
        self.reuse_after_answer = reuse_after_answer
        self.calls: dict[str, int] = {}  # id -> message of its newest call
        self.results: dict[str, int] = {}  # id -> message of the result answering that call
        self._open: set[str] = set()

    def call(self, call_id: str, index: int) -> None:
        if call_id in self._open or (not self.reuse_after_answer and call_id in self.calls):
            first = self.calls[call_id]
            what = "is used by two calls" if first == index else "is used by two calls before the first is answered"
            self._refuse(call_id, first, index, what)
        self._open.add(call_id)
        self.calls[call_id] = index
        self.results.pop(call_id, None)

    def result(self, call_id: str, index: int) -> None:
        first = self.results.get(call_id)
        if first is not None:
            self._refuse(call_id, first, index, "is answered by two results")
        self._open.discard(call_id)
        self.results[call_id] = index

    def _refuse(self, call_id: str, first: int, index: int, what: str) -> None:
        where = f"in {self.label} {index}" if first == index else f"in {self.label} {first} and {self.label} {index}"
        raise FormatError(
            f"{self.label} {index}: call id {call_id!r} {what} ({where}); refused, never paired by position"
        )


def check_ids(trajectory: Trajectory) -> None:
    """Refuse a trajectory whose calls and results cannot be paired unambiguously (see :class:`CallIds`)."""
    ids = CallIds()
    for index, message in enumerate(trajectory.messages):
        for call in message.tool_calls:
            ids.call(call.id, index)
        if message.role == "tool" and message.tool_call_id is not None:
            ids.result(message.tool_call_id, index)


def optional_str(item: Mapping[str, Any], key: str, where: str) -> str | None:
    """``item[key]`` when it is a string or absent; anything else raises."""
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise FormatError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value
