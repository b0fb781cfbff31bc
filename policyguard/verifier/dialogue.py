"""The dialogue as the verifier reads it: one JSON object per message, so no content can forge structure.

The verifier's prompt shows the conversation as a JSON array with exactly one
message per line. Each message is one JSON object (``index``, ``role``,
``content``, ``tool_calls``, ``tool_call_id``, ``name``, ``is_error``), encoded
by :func:`safe_json`, which guarantees that the encoded text

* holds no line break of any kind: JSON escapes ``\\n``, ``\\r`` and the other
  control characters, and :func:`safe_json` also escapes NEL (U+0085), the line
  and paragraph separators (U+2028, U+2029), every other control or format
  character (bidi overrides, zero-width characters) and lone surrogates;
* holds no ``</``: it is written ``<\\/`` (the same JSON string), so a
  ``</policy>`` typed by a user never reads as the end of a tag.

A message's text therefore always sits inside one quoted JSON string on that
message's own line: a ``[9] tool result: ...`` line, a ``# Pending action``
heading or a closing policy tag inside it stays what it is, that message's
content. Only the lines PolicyGuard writes around the array are structure.

When the dialogue is longer than the verifier's prompt budget,
:func:`select_rows` keeps the messages the requirements rest on (the newest
result of every prerequisite or fact-source read, per tool and arguments), the
calls that asked for them, and the last ``keep_last`` messages; every run of
left-out messages becomes one marker object ``{"elided_messages": n,
"first_index": a, "last_index": b}``. If even that does not fit,
:class:`PromptBudgetError` says so and the verifier blocks.

Token counts are estimated, never computed with a tokenizer: UTF-8 bytes / 4,
rounded up (:func:`estimate_tokens`). On the shipped airline cancellation
example the whole prompt is estimated at 4,845 tokens against 4,536 by gpt-4o's
tokenizer; the instructions are over-counted (+14%) and the JSON dialogue
under-counted (-15%: its punctuation tokenizes densely), so a dialogue-heavy
prompt at the default budget of 100,000 estimated tokens is about 115,000 real
ones. Scripts with multi-byte letters are over-counted (safe for a budget).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from policyguard.errors import PolicyGuardError
from policyguard.trajectory import strictjson
from policyguard.trajectory.limits import loads_json
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class PromptBudgetError(PolicyGuardError):
    """The dialogue does not fit the verifier's prompt budget even with everything optional elided."""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if unicodedata.category(char) not in _ESCAPED_CATEGORIES:
        return char
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def safe_json(value: Any) -> str:
    """``value`` as compact JSON on one line, with nothing in it that reads as a line break or a closing tag.

    ``json.loads(safe_json(v)) == v`` for any JSON value ``v``.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    if text.isascii() and text.isprintable():
        return text
    return _NOT_PRINTABLE_ASCII.sub(_escape, text)


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: UTF-8 bytes / 4, rounded up."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


@dataclass(eq=False)
class Row:
    """One message the verifier may be shown: its index in the full trajectory, role and encoded line.

    The line is encoded on first use, so a dialogue that must be shortened
    encodes only the messages it keeps. ``size_hint`` is the length of the
    text it shows, a lower bound of the line's length.
    """

    index: int
    role: str
    fields: dict[str, Any]
    size_hint: int
    calls: tuple[str, ...] = ()
    answers: ToolCall | None = None
    ok: bool = True

    @cached_property
    def line(self) -> str:
        content = self.fields.get("content")
        fields = self.fields
        if self.role == "tool" and isinstance(content, str):
            fields = {**fields, "content": _content_value(content)}
        return safe_json({"index": self.index, "role": self.role, **fields})


@dataclass(frozen=True)
class DialogueView:
    """What the verifier was shown, and what its citations may refer to.

    ``citable`` maps each message index the model can see to its role (the
    system prompt, whose text is never shown, is not citable).
    ``last_statement`` is the agent's last message to the user before the
    pending call: the last assistant message with text and no tool call (the
    message that ended the agent's turn, after which the user could answer).
    ``pending_index`` is the message holding the pending call (the trajectory's
    length when it is not in the trajectory).
    """

    citable: dict[int, str]
    total_messages: int
    pending_index: int
    last_statement: int | None
    elided: int = 0
    kept_reads: int = 0


def build_rows(trajectory: Trajectory, pending_id: str, *, tools_only: bool) -> list[Row]:
    """Every message the verifier may be shown, in order, each encoded as one line.

    The pending call is left out (it is shown as the pending action); the
    agent's system prompt is shown as a row without its text. In tools-only
    mode, user and system messages and the agent's text are left out.
    """
    rows: list[Row] = []
    calls_by_id: dict[str, ToolCall] = {}
    for index, message in enumerate(trajectory.messages):
        row = _row(index, message, pending_id, calls_by_id, tools_only)
        if row is not None:
            rows.append(row)
    return rows


def _row(
    index: int, message: Message, pending_id: str, calls_by_id: dict[str, ToolCall], tools_only: bool
) -> Row | None:
    if message.role in ("system", "user"):
        if tools_only:
            return None
        if message.role == "system":
            return Row(index, "system", {"content": None}, 0)
        text = message.content or ""
        return Row(index, "user", {"content": text}, len(text))
    if message.role == "assistant":
        calls = [c for c in message.tool_calls if c.id != pending_id]
        for c in calls:
            calls_by_id[c.id] = c
        text = "" if tools_only else (message.content or "")
        if not calls and not text:
            return None
        fields: dict[str, Any] = {}
        if text:
            fields["content"] = text
        if calls:
            fields["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        return Row(index, "assistant", fields, len(text), calls=tuple(c.id for c in calls))
    # role == "tool"
    if message.tool_call_id == pending_id:
        return None
    # like the facts (Trajectory.tool_results), only the first answer to a call is its result
    answered = calls_by_id.pop(message.tool_call_id or "", None)
    fields = {"tool_call_id": message.tool_call_id}
    if answered is None:
        fields["answers_no_call"] = True
    else:
        fields["name"] = answered.name
    if message.is_error:
        fields["is_error"] = True
    text = message.content or ""
    fields["content"] = text
    # compacting a JSON result can drop its whitespace, hence half the text as the lower bound
    return Row(index, "tool", fields, len(text) // 2, answers=answered, ok=not message.is_error)


def _content_value(text: str) -> Any:
    """A tool result that is a JSON object or array, as that JSON value (same data, fewer tokens); else the text."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return text
    try:
        return loads_json(stripped)
    except ValueError:
        return text


def conversation_json(lines: Iterable[str]) -> str:
    """The rows as one JSON array, one element per line."""
    body = ",\n".join(lines)
    return "[\n" + body + "\n]" if body else "[]"


def elision_marker(count: int, first: int, last: int) -> str:
    return safe_json({"elided_messages": count, "first_index": first, "last_index": last})


@dataclass(frozen=True)
class Selection:
    """The lines of a shortened dialogue, the rows they show, and how many messages and reads were elided/kept."""

    lines: list[str]
    shown: list[Row]
    elided: int
    kept_reads: int


def select_rows(rows: list[Row], *, keep_last: int, evidence_tools: Collection[str]) -> Selection:
    """The rows to keep under a budget, with one elision marker per run of left-out rows.

    Kept: the newest successful result of each read of an ``evidence_tools`` tool
    (per tool and arguments), the assistant message holding each kept result's
    call, and the last ``keep_last`` rows.
    """
    keep: set[int] = set(range(max(0, len(rows) - keep_last), len(rows)))
    newest: dict[tuple[str, str], int] = {}
    for position, row in enumerate(rows):
        call = row.answers
        if call is not None and row.ok and call.name in evidence_tools:
            newest[(call.name, json.dumps(call.arguments, sort_keys=True, default=repr))] = position
    keep.update(newest.values())
    wanted_calls = {call.id for p in keep if (call := rows[p].answers) is not None}
    keep.update(p for p, row in enumerate(rows) if row.calls and wanted_calls.intersection(row.calls))
    lines: list[str] = []
    shown: list[Row] = []
    elided = 0
    gap: list[Row] = []
    for position, row in enumerate(rows):
        if position in keep:
            if gap:
                lines.append(elision_marker(len(gap), gap[0].index, gap[-1].index))
                elided += len(gap)
                gap = []
            lines.append(row.line)
            shown.append(row)
        else:
            gap.append(row)
    if gap:
        lines.append(elision_marker(len(gap), gap[0].index, gap[-1].index))
        elided += len(gap)
    return Selection(lines=lines, shown=shown, elided=elided, kept_reads=len(newest))


def pending_index(trajectory: Trajectory, pending_id: str) -> int:
    """The index of the message holding the pending call, or the trajectory's length."""
    for index in range(len(trajectory.messages) - 1, -1, -1):
        if any(c.id == pending_id for c in trajectory.messages[index].tool_calls):
            return index
    return len(trajectory.messages)


def last_statement(trajectory: Trajectory, before: int) -> int | None:
    """The last assistant message before ``before`` with text and no tool call."""
    for index in range(min(before, len(trajectory.messages)) - 1, -1, -1):
        message = trajectory.messages[index]
        if message.role == "assistant" and not message.tool_calls and (message.content or "").strip():
            return index
    return None


def parse_conversation(per_call_text: str) -> list[dict[str, Any]]:
    """Read the conversation array back from a rendered per-call prompt part (for tests and tools).

    The array starts at the first line that is exactly ``[`` (or ``[]``) and ends
    at the next line that is exactly ``]``.
    """
    lines = per_call_text.split("\n")
    start = next(i for i, line in enumerate(lines) if line in ("[", "[]"))
    if lines[start] == "[]":
        return []
    end = lines.index("]", start)
    value = strictjson.loads("\n".join(lines[start : end + 1]))
    if not isinstance(value, list):
        raise ValueError("the conversation is not a JSON array")
    return value
