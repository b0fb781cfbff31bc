"""A stand-in for the ``claude`` CLI that the Claude Agent SDK drives, so its hooks run with no API key.

The SDK starts ``ClaudeAgentOptions(cli_path=...)`` and speaks its stream-json control
protocol over the process's stdin and stdout. This script speaks the CLI's half of it,
as far as tool calls go: it answers ``initialize`` (noting the hook callback ids the SDK
registered), and for each user message plays the next turn of a script instead of
asking a model. For each tool call it

1. writes the assistant message to the session's transcript (one JSONL line per block,
   sharing ``message.id``, as Claude Code does) and sends it to the SDK;
2. sends a ``hook_callback`` control request with a PreToolUse input to every PreToolUse
   callback whose matcher matches the tool, and reads the answers;
3. unless a callback denied (or asked, which this CLI has no one to ask), runs the tool:
   an ``mcp__<server>__<tool>`` through the SDK's in-process MCP server (``mcp_message``
   requests), another tool by taking its ``result`` from the script;
4. writes the tool result (the deny reason, for a denied call) to the transcript, sends it
   to the SDK as a user message, and sends PostToolUse (PostToolUseFailure for a tool that
   failed) to the matching callbacks.

Each turn ends with a ``result`` message whose ``result`` is JSON:
``{"decisions": [[tool_use_id, permissionDecision or null, reason], ...]}``.

The script is JSON in the ``STAND_IN_SCRIPT`` environment variable (pass it with
``ClaudeAgentOptions(env=...)``)::

    {"session_id": "...", "transcript": "/path/session.jsonl",
     "turns": [[step, ...], ...]}     # one list of steps per user message

A step is one of ``{"calls": [{"id", "name", "input", "result"?}], "message_id"?, "order"?,
"agent_id"?, "agent_type"?, "sidechain"?}`` (one assistant message; ``order``: the ids
whose tools run, in the order they answer; default all, in order), ``{"say": text}``,
``{"user": text, "sidechain"?}`` and ``{"compact": summary}``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

VERSION = "2.1.332"  # the Claude Code version the SDK 0.2.189 bundles; this stand-in speaks its protocol


def cli_path(folder: Path) -> Path:
    """An executable in ``folder`` that runs this script with this interpreter: pass it as ``cli_path``."""
    shim = folder / "claude"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n', encoding="utf-8")
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return shim


class StandIn:
    def __init__(self, script: dict[str, Any]) -> None:
        self.session: str = script["session_id"]
        self.transcript = Path(script["transcript"])
        self.turns: list[list[dict[str, Any]]] = list(script["turns"])
        self.callbacks: dict[str, list[tuple[str | None, str]]] = {}
        self.parent: str | None = None
        self.next_request = 0
        self.mcp_ready: set[str] = set()
        self.decisions: list[list[Any]] = []
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.transcript.touch()

    # --- the wire ---------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def receive(self) -> dict[str, Any] | None:
        line = sys.stdin.readline()
        return json.loads(line) if line else None

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A control request to the SDK, and the response it answers."""
        self.next_request += 1
        request_id = f"req_{self.next_request}_stand_in"
        self.send({"type": "control_request", "request_id": request_id, "request": body})
        while True:
            message = self.receive()
            if message is None:
                raise SystemExit(f"stdin closed while waiting for {request_id}")
            response = message.get("response", {})
            if message.get("type") == "control_response" and response.get("request_id") == request_id:
                if response.get("subtype") == "error":
                    return {"error": response.get("error")}
                return dict(response.get("response") or {})

    def run(self) -> None:
        while (message := self.receive()) is not None:
            if message.get("type") == "control_request":
                body = message["request"]
                answer: dict[str, Any] = {}
                if body.get("subtype") == "initialize":
                    for event, matchers in (body.get("hooks") or {}).items():
                        self.callbacks[event] = [(m.get("matcher"), i) for m in matchers for i in m["hookCallbackIds"]]
                    answer = {"commands": [], "hook_on_failure_supported": True}
                response = {"subtype": "success", "request_id": message["request_id"], "response": answer}
                self.send({"type": "control_response", "response": response})
            elif message.get("type") == "user":
                content = message["message"]["content"]
                self.line("user", {"role": "user", "content": content})
                self.turn(self.turns.pop(0) if self.turns else [])

    # --- the transcript ---------------------------------------------------------------------

    def line(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        line_id = str(uuid.uuid4())
        entry = {"parentUuid": self.parent, "isSidechain": False, "userType": "external",
                 "cwd": str(self.transcript.parent), "sessionId": self.session, "version": VERSION,
                 "type": kind, "message": message, "uuid": line_id, "timestamp": "2026-12-04T10:00:00.000Z",
                 **extra}  # fmt: skip
        self.parent = line_id
        with self.transcript.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    # --- one turn ---------------------------------------------------------------------------

    def turn(self, steps: list[dict[str, Any]]) -> None:
        self.decisions = []
        for step in steps:
            if "calls" in step:
                self.calls(step)
            elif "say" in step:
                self.assistant([{"type": "text", "text": step["say"]}], f"msg_{uuid.uuid4().hex[:12]}", {})
            elif "user" in step:
                self.line("user", {"role": "user", "content": step["user"]}, isSidechain=step.get("sidechain", False))
            elif "compact" in step:
                self.line("system", {"role": "system", "content": "Conversation compacted"},
                          subtype="compact_boundary")  # fmt: skip
                self.line("user", {"role": "user", "content": f"Summary: {step['compact']}"},
                          isCompactSummary=True, isVisibleInTranscriptOnly=True)  # fmt: skip
        result = json.dumps({"decisions": self.decisions})
        self.send({"type": "result", "subtype": "success", "duration_ms": 0, "duration_api_ms": 0, "is_error": False,
                   "num_turns": 1, "session_id": self.session, "result": result})  # fmt: skip

    def assistant(self, blocks: list[dict[str, Any]], message_id: str, extra: dict[str, Any]) -> None:
        for block in blocks:
            self.line("assistant", {"id": message_id, "type": "message", "role": "assistant", "model": "stand-in",
                                    "content": [block], "stop_reason": None}, **extra)  # fmt: skip
        self.send({"type": "assistant", "session_id": self.session, "parent_tool_use_id": None,
                   "message": {"id": message_id, "type": "message", "role": "assistant", "model": "stand-in",
                               "content": blocks}})  # fmt: skip

    def calls(self, step: dict[str, Any]) -> None:
        calls = step["calls"]
        extra = {"isSidechain": True} if step.get("sidechain") else {}
        agent: dict[str, Any] = {key: step[key] for key in ("agent_id", "agent_type") if key in step}
        blocks = [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["input"]} for c in calls]
        self.assistant(blocks, step.get("message_id") or f"msg_{uuid.uuid4().hex[:12]}", extra)
        refused: dict[str, str] = {}
        for call in calls:
            decision, reason = self.pre_tool_use(call, agent)
            self.decisions.append([call["id"], decision, reason])
            if decision in ("deny", "ask"):
                refused[call["id"]] = reason or f"permission {decision}"
        by_id = {c["id"]: c for c in calls}
        for call_id in [*refused, *[i for i in step.get("order", list(by_id)) if i not in refused]]:
            call = by_id[call_id]
            if call_id in refused:
                text, failed = refused[call_id], True
            else:
                text, failed = self.run_tool(call)
            block = {"type": "tool_result", "tool_use_id": call_id, "content": [{"type": "text", "text": text}]}
            if failed:
                block["is_error"] = True
            self.line("user", {"role": "user", "content": [block]}, toolUseResult=text, **extra)
            self.send({"type": "user", "session_id": self.session, "parent_tool_use_id": None,
                       "message": {"role": "user", "content": [block]}})  # fmt: skip
            if call_id not in refused:
                self.post_tool_use(call, agent, text, failed)

    def event(self, name: str, call: dict[str, Any], agent: dict[str, Any]) -> dict[str, Any]:
        return {"session_id": self.session, "transcript_path": str(self.transcript), "cwd": os.getcwd(),
                "permission_mode": "default", "hook_event_name": name, "tool_name": call["name"],
                "tool_input": call["input"], "tool_use_id": call["id"], **agent}  # fmt: skip

    def hooks(self, name: str, tool: str, event: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.request({"subtype": "hook_callback", "callback_id": callback_id, "input": event,
                              "tool_use_id": event["tool_use_id"]})
                for matcher, callback_id in self.callbacks.get(name, []) if _matches(matcher, tool)]  # fmt: skip

    def pre_tool_use(self, call: dict[str, Any], agent: dict[str, Any]) -> tuple[str | None, str | None]:
        """The strictest answer of the PreToolUse callbacks: deny, then ask, then allow, else none.
        A callback that failed blocks (the matchers ask for ``onFailure: "block"``)."""
        answers = self.hooks("PreToolUse", call["name"], self.event("PreToolUse", call, agent))
        found: dict[str, str | None] = {}
        for answer in answers:
            if "error" in answer:
                found.setdefault("deny", f"hook error: {answer['error']}")
                continue
            output = answer.get("hookSpecificOutput") or {}
            if output.get("permissionDecision"):
                found.setdefault(output["permissionDecision"], output.get("permissionDecisionReason"))
        for decision in ("deny", "ask", "allow"):
            if decision in found:
                return decision, found[decision]
        return None, None

    def post_tool_use(self, call: dict[str, Any], agent: dict[str, Any], text: str, failed: bool) -> None:
        if failed:
            event = {**self.event("PostToolUseFailure", call, agent), "error": text}
            self.hooks("PostToolUseFailure", call["name"], event)
        else:
            self.hooks("PostToolUse", call["name"], {**self.event("PostToolUse", call, agent), "tool_response": text})

    def run_tool(self, call: dict[str, Any]) -> tuple[str, bool]:
        parts = call["name"].split("__")
        if len(parts) != 3 or parts[0] != "mcp":
            result = call.get("result", "")
            return (result if isinstance(result, str) else json.dumps(result)), False
        server, tool = parts[1], parts[2]
        if server not in self.mcp_ready:
            self.mcp(server, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "stand-in", "version": VERSION}}})  # fmt: skip
            self.mcp(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            self.mcp_ready.add(server)
        reply = self.mcp(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": tool, "arguments": call["input"]}})  # fmt: skip
        if "error" in reply:
            return json.dumps(reply["error"]), True
        result = reply.get("result", {})
        text = "".join(block.get("text", "") for block in result.get("content", []))
        return text, bool(result.get("isError"))

    def mcp(self, server: str, message: dict[str, Any]) -> dict[str, Any]:
        answer = self.request({"subtype": "mcp_message", "server_name": server, "message": message})
        return dict(answer.get("mcp_response") or answer)


def _matches(matcher: str | None, tool: str) -> bool:
    """Claude Code's matcher: empty or ``*`` matches every tool, ``A|B`` names tools, anything else is a regex."""
    if not matcher or matcher == "*":
        return True
    if re.fullmatch(r"[\w|]+", matcher):
        return tool in matcher.split("|")
    return re.search(matcher, tool) is not None


if __name__ == "__main__":
    StandIn(json.loads(os.environ["STAND_IN_SCRIPT"])).run()
