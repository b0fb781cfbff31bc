"""Guard Claude Code's tool calls from its hooks: one hook event in, the hook's JSON answer out.

``policyguard hook claude-code`` (:mod:`policyguard.cli.cmd_hook`) and ``serve``'s
``POST /v1/hooks/claude-code`` (:mod:`policyguard.serve.hooks`) both hand the
event to :meth:`ClaudeCodeHook.answer`.

**PreToolUse.** The pending call (``tool_use_id``, ``tool_name``, ``tool_input``)
is judged with ``Guard.check(..., session=session_id)`` on the dialogue read from
``transcript_path`` (:mod:`policyguard.integrations.claude_code_transcript`; the
pending call may not be in it yet). The answer is

- a block: ``permissionDecision: "deny"`` with the remediation as
  ``permissionDecisionReason`` (Claude reads it);
- an escalation: ``"ask"``, so Claude Code asks the person at the keyboard;
- a halt: a deny, plus ``"continue": false`` so Claude stops;
- a pass: no opinion (``{}``), so Claude Code's own permission rules still apply;
  with ``allow=True``, ``"allow"``.

**PostToolUse** records ``tool_response`` as the call's result in the session
record (``Guard.record_result``), so facts come from what the tool returned;
``PostToolUseFailure`` records its ``error`` as a failed result.

**Fail closed.** An unreadable transcript, a call that cannot be judged, or an
error in the guard answers a deny naming the reason. An event that cannot be read
at all raises :class:`HookInputError` (the command exits 2, which Claude Code
treats as a block; never 1, which it treats as "go ahead").

**Tool names.** MCP tools arrive as ``mcp__<server>__<tool>``. By default the
prefix is stripped (``mcp__billing__issue_refund`` is judged as ``issue_refund``);
per server, ``McpNames({"billing": "keep"})`` keeps the full name and
``{"billing": "prefix:billing."}`` judges ``billing.issue_refund``. The names in the
transcript are mapped the same way, so facts match. A tool no checklist entry
covers is judged by the guard as unknown (blocked unless ``unknown_tools="check"``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from policyguard.decision import Decision
from policyguard.errors import ConfigError, PolicyGuardError
from policyguard.guard import NO_VERIFIER_MESSAGE, Guard, remediation_message
from policyguard.trajectory.formats import anthropic
from policyguard.trajectory.messages import ToolCall

from .claude_code_transcript import read_transcript, result_text

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.session import Session

__all__ = ["ClaudeCodeHook", "HookEvent", "HookInputError", "McpNames", "UNREADABLE_MESSAGE"]

UNREADABLE_MESSAGE = (
    "The conversation could not be read ({problem}), so no fact in it can be trusted and this call was not performed. "
    "Do not retry it now; tell the user it cannot be completed at the moment."
)
ESCALATED_MESSAGE = "This call needs a person's approval under the policy."


class HookInputError(PolicyGuardError):
    """The hook event cannot be read (not JSON, not an object, a required field missing)."""


class HookEvent(BaseModel):
    """The fields of a Claude Code hook event the guard reads.

    ``extra="ignore"``, not ``"forbid"``: Claude Code adds fields to its events
    (``permission_mode``, ``agent_id``...), and refusing an unknown one would block
    every call after a Claude Code update.
    """

    model_config = ConfigDict(extra="ignore")

    session_id: str
    hook_event_name: str
    transcript_path: str | None = None
    cwd: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    tool_response: Any = None
    error: Any = None

    @classmethod
    def read(cls, raw: Any) -> HookEvent:
        """The event from its JSON text or parsed object; :class:`HookInputError` when it cannot be read."""
        if isinstance(raw, (str, bytes)):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise HookInputError(f"the hook event is not JSON: {exc}") from None
        if not isinstance(raw, Mapping):
            raise HookInputError(f"the hook event must be a JSON object, got {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "event"
            raise HookInputError(f"the hook event's {where}: {first['msg']}") from None


class McpNames:
    """How ``mcp__<server>__<tool>`` names map to checklist names: per server ``"strip"`` (the default),
    ``"keep"`` or ``"prefix:TEXT"`` (``TEXT`` + tool)."""

    def __init__(self, servers: Mapping[str, str] | None = None, default: str = "strip") -> None:
        self.servers = dict(servers or {})
        for server, rule in [*self.servers.items(), ("(default)", default)]:
            if rule not in ("strip", "keep") and not rule.startswith("prefix:"):
                raise ConfigError(f"MCP server {server!r}: name rule {rule!r} is not strip, keep or prefix:TEXT")
        self.default = default

    @classmethod
    def parse(cls, specs: list[str]) -> McpNames:
        """From ``SERVER=RULE`` strings (the command line's ``--mcp-name``)."""
        servers: dict[str, str] = {}
        for spec in specs:
            server, sep, rule = spec.partition("=")
            if not sep or not server:
                raise ConfigError(f"--mcp-name {spec!r}: expected SERVER=strip, SERVER=keep or SERVER=prefix:TEXT")
            servers[server] = rule
        return cls(servers)

    def __call__(self, name: str) -> str:
        if not name.startswith("mcp__"):
            return name
        server, sep, tool = name[len("mcp__") :].partition("__")
        if not sep or not server or not tool:
            return name
        rule = self.servers.get(server, self.default)
        if rule == "keep":
            return name
        if rule == "strip":
            return tool
        return rule[len("prefix:") :] + tool


class ClaudeCodeHook:
    """Answers Claude Code hook events for one guard (see the module docstring).

    ``transcripts``: when set, only a ``transcript_path`` inside this folder is read
    (``serve`` sets it, so a client cannot make the server read other files); a
    path outside it is a deny. ``sessions``: where the record of a session id is
    found; by default the guard's own (:meth:`Guard.session`). ``serve`` passes
    the session objects it keeps for every request, so a session is not read back
    from its store whole on each event.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        allow: bool = False,
        names: McpNames | None = None,
        transcripts: Path | None = None,
        sessions: Callable[[str], Session] | None = None,
    ) -> None:
        self.guard = guard
        self.allow = allow
        self.names = names or McpNames()
        self.transcripts = transcripts
        self.sessions = sessions

    def _session(self, session_id: str) -> Session | str:
        return session_id if self.sessions is None else self.sessions(session_id)

    def answer(self, raw: Any) -> dict[str, Any]:
        """The hook's JSON answer to one event (``{}``: no opinion). Raises only :class:`HookInputError`."""
        event = raw if isinstance(raw, HookEvent) else HookEvent.read(raw)
        kind = event.hook_event_name
        if kind == "PreToolUse":
            return self.pre_tool_use(event)
        if kind in ("PostToolUse", "PostToolUseFailure"):
            self.post_tool_use(event)
            return {}
        raise HookInputError(f"hook event {kind!r}: only PreToolUse, PostToolUse and PostToolUseFailure are guarded")

    def pre_tool_use(self, event: HookEvent) -> dict[str, Any]:
        call_id, name = event.tool_use_id, event.tool_name
        if not call_id or not name or event.tool_input is None:
            raise HookInputError("a PreToolUse event needs tool_use_id, tool_name and tool_input")
        call = ToolCall(id=call_id, name=self.names(name), arguments=event.tool_input)
        try:
            messages = self._messages(event)
            trajectory = anthropic.read_plain(messages)  # JSON read from the transcript: plain already, and ours
        except PolicyGuardError as exc:
            return deny(UNREADABLE_MESSAGE.format(problem=_one_line(exc)))
        try:
            decision = self.guard.check(call, trajectory, session=self._session(event.session_id))
        except Exception as exc:  # fail closed: an error in the guard or its store is a deny, never a pass
            return deny(f"{NO_VERIFIER_MESSAGE} ({type(exc).__name__}: {_one_line(exc)})")
        return self._decided(call, decision)

    def post_tool_use(self, event: HookEvent) -> bool:
        """Record the call's result; False when the record has no unanswered call of that id."""
        if not event.tool_use_id:
            raise HookInputError(f"a {event.hook_event_name} event needs tool_use_id")
        if event.hook_event_name == "PostToolUseFailure":
            text, failed = result_text(event.error) or "the tool failed", True
        else:
            text, failed = response_text(event.tool_response)
        return self.guard.record_result(self._session(event.session_id), event.tool_use_id, text, is_error=failed)

    def _messages(self, event: HookEvent) -> list[dict[str, Any]]:
        if not event.transcript_path:
            return []
        path = Path(event.transcript_path)
        if self.transcripts is not None and not _inside(path, self.transcripts):
            raise ConfigError(f"the transcript is not under {self.transcripts}, where this server reads transcripts")
        return read_transcript(path, self.names)

    def _decided(self, call: ToolCall, decision: Decision) -> dict[str, Any]:
        if decision.outcome == "allow":
            return _pre("allow", "policyguard: allowed") if self.allow else {}
        if decision.outcome == "escalate":
            return _pre("ask", decision.message or ESCALATED_MESSAGE)
        text = remediation_message(call, decision).content or NO_VERIFIER_MESSAGE
        if decision.outcome == "halt":
            return {**deny(text), "continue": False, "stopReason": text}
        return deny(text)


def deny(reason: str) -> dict[str, Any]:
    """A PreToolUse deny whose reason Claude reads."""
    return _pre("deny", reason)


def _pre(decision: Literal["allow", "deny", "ask"], reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def response_text(response: Any) -> tuple[str, bool]:
    """A PostToolUse ``tool_response`` as the result text the record keeps, and whether it reports a failure.

    MCP tools answer ``{"content": [...], "isError": bool}`` or a block list; built-in
    tools an object; either may be a plain string."""
    if isinstance(response, Mapping) and "content" in response and set(response) <= {"content", "isError",
                                                                                     "structuredContent"}:  # fmt: skip
        return result_text(response["content"]), response.get("isError") is True
    if isinstance(response, list):
        return result_text(response), False
    if isinstance(response, str):
        return response, False
    return json.dumps(response, sort_keys=True, default=str), False


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]
