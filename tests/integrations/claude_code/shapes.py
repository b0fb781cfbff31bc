"""Claude Code's documented shapes: hook events on stdin and transcript JSONL lines.

A hook event carries ``session_id``, ``transcript_path``, ``cwd``, ``permission_mode``,
``hook_event_name``, ``tool_name``, ``tool_input``, ``tool_use_id`` and, on PostToolUse,
``tool_response``. A transcript line is ``{"type": "user" | "assistant", "message": {...},
"isSidechain": bool, ...}``; an assistant message's blocks are written one line each, all
with the same ``message.id``; the summary after compaction is a user line with
``"isCompactSummary": true``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

SESSION = "5f1c8d2e-0000-4000-8000-000000000001"


class Transcript:
    """A transcript file written as Claude Code writes it, line by line."""

    def __init__(self, path: Path, session: str = SESSION) -> None:
        self.path = path
        self.session = session
        self.path.write_text("", encoding="utf-8")
        self._parent: str | None = None

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        line_id = str(uuid.uuid4())
        entry = {
            "parentUuid": self._parent, "isSidechain": False, "userType": "external", "cwd": str(self.path.parent),
            "sessionId": self.session, "version": "2.0.0", "type": kind, "message": message, "uuid": line_id,
            "timestamp": "2026-12-04T10:00:00.000Z", **extra,
        }  # fmt: skip
        self._parent = line_id
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def user(self, text: str, **extra: Any) -> None:
        self._line("user", {"role": "user", "content": text}, **extra)

    def assistant(self, *blocks: dict[str, Any], message_id: str | None = None, **extra: Any) -> None:
        """One assistant message: one line per block, sharing ``message.id``."""
        message_id = message_id or f"msg_{uuid.uuid4().hex[:12]}"
        for block in blocks:
            message = {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                       "content": [block], "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
            self._line("assistant", message, **extra)

    def result(self, call_id: str, value: Any, *, error: bool = False, **extra: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        block: dict[str, Any] = {
            "tool_use_id": call_id,
            "type": "tool_result",
            "content": [{"type": "text", "text": text}],
        }
        if error:
            block["is_error"] = True
        self._line("user", {"role": "user", "content": [block]}, toolUseResult=value, **extra)

    def compact(self, summary: str) -> None:
        self._line("system", {"role": "system", "content": "Conversation compacted"}, subtype="compact_boundary")
        self.user(f"This session is being continued from a previous conversation. Summary: {summary}",
                  isCompactSummary=True, isVisibleInTranscriptOnly=True)  # fmt: skip


def use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def pre(transcript: Transcript, call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A PreToolUse event for the call."""
    return {
        "session_id": transcript.session, "transcript_path": str(transcript.path), "cwd": str(transcript.path.parent),
        "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": name, "tool_input": arguments,
        "tool_use_id": call_id,
    }  # fmt: skip


def post(transcript: Transcript, call_id: str, name: str, response: Any, **arguments: Any) -> dict[str, Any]:
    """A PostToolUse event: the call's ``tool_response``."""
    return {**pre(transcript, call_id, name, **arguments), "hook_event_name": "PostToolUse", "tool_response": response}
