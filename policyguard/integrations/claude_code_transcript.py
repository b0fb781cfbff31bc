"""Claude Code's session transcript (JSONL) -> Anthropic messages the guard reads.

Claude Code appends one JSON object per line to the file named by a hook event's
``transcript_path``. The lines that carry dialogue have ``type`` ``"user"`` or
``"assistant"`` and a ``message`` in the Anthropic Messages shape (``role``,
``content``: a string or a list of ``text``, ``tool_use`` and ``tool_result``
blocks). Other lines (``summary``, ``system``, snapshots) carry none and are skipped.

- **One assistant message, several lines.** Claude Code writes each content block
  of an assistant message on its own line, all with the same ``message.id``;
  consecutive lines of one id are joined back into one message, so the calls of
  one message keep their order and stay siblings.
- **Sub-agents.** Lines with ``"isSidechain": true`` are a sub-agent's turns. Their
  calls and results are read like any other (a sub-agent's write is judged, its
  reads are facts). A sidechain's plain user text is the prompt the parent agent
  wrote, not the user: it is dropped, so it can never stand for the user.
- **Compaction.** A user line with ``"isCompactSummary": true`` is the summary the
  model wrote of everything before it. The dialogue starts after the last one and
  the summary itself is dropped (model-written text is no fact and no user
  consent); the guard's session record, fed by earlier hooks, still holds what ran.
- **Blocks.** A ``tool_result``'s content list is flattened to its text (an image
  becomes ``[image]``). Blocks the guard has no reading for (server tool blocks,
  ...) are dropped: dropping never adds a fact or a user's yes. A result whose call
  is not in the dialogue read (it was compacted away) is dropped too.
- **Tool names** go through ``rename`` (the MCP mapping of
  :mod:`policyguard.integrations.claude_code`) so they match the checklist.

A line that is not JSON, or a file that cannot be read, raises
:class:`~policyguard.errors.FormatError` naming the file and line: the caller
blocks the call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from policyguard.errors import FormatError

__all__ = ["dialogue", "read_transcript"]

_USER_BLOCKS = frozenset({"text", "image", "document"})


def read_transcript(path: str | Path, rename: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """The Anthropic messages of the transcript at ``path`` (see the module docstring)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return dialogue(_lines(handle, str(path)), rename)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the transcript: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: the transcript is not UTF-8: {exc.reason}") from None


def _lines(handle: Iterable[str], where: str) -> Iterable[dict[str, Any]]:
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            if line.endswith("\n"):
                raise FormatError(f"{where}, line {number}: not JSON: {exc}") from None
            return  # the last line, still being written: it is not part of the dialogue yet
        if isinstance(entry, dict):
            yield entry


def dialogue(entries: Iterable[dict[str, Any]], rename: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """Anthropic messages from transcript entries (parsed JSONL lines), in file order."""
    messages: list[dict[str, Any]] = []
    last_id: str | None = None  # the message.id of the open assistant message
    for entry in entries:
        kind, message = entry.get("type"), entry.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        if entry.get("isCompactSummary") is True:
            messages, last_id = [], None
            continue
        sidechain = entry.get("isSidechain") is True
        if kind == "assistant":
            blocks = _assistant_blocks(message.get("content"), rename)
            message_id = message.get("id")
            if isinstance(message_id, str) and message_id == last_id and messages:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": "assistant", "content": blocks})
            last_id = message_id if isinstance(message_id, str) else None
        else:
            blocks = _user_blocks(message.get("content"), sidechain)
            last_id = None
            if blocks:
                messages.append({"role": "user", "content": blocks})
    return _answered_only(messages)


def _assistant_blocks(content: Any, rename: Callable[[str], str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    kept: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            kept.append({"type": "text", "text": block["text"]})
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            kept.append({"type": "tool_use", "id": block.get("id"), "name": rename(block["name"]),
                         "input": block.get("input", {})})  # fmt: skip
    return kept


def _user_blocks(content: Any, sidechain: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [] if sidechain else [{"type": "text", "text": content}]
    kept: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            result = {"type": "tool_result", "tool_use_id": block.get("tool_use_id"),
                      "content": result_text(block.get("content"))}  # fmt: skip
            if block.get("is_error") is True:
                result["is_error"] = True
            kept.append(result)
        elif not sidechain and kind in _USER_BLOCKS:
            kept.append({"type": "text", "text": block["text"]} if kind == "text" else {"type": kind})
    return kept


def result_text(content: Any) -> str:
    """A tool result's content as text: a string as it is, a block list joined one block per line."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return json.dumps(content, sort_keys=True, default=str)


def _answered_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop results whose call is not in the dialogue (compacted away), and messages left empty."""
    issued: set[Any] = set()
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "assistant":
            issued.update(b.get("id") for b in message["content"] if b["type"] == "tool_use")
        else:
            message["content"] = [
                b for b in message["content"] if b["type"] != "tool_result" or b["tool_use_id"] in issued
            ]
        if message["content"] or message["role"] == "assistant":
            kept.append(message)
    return [m for m in kept if m["content"]]
