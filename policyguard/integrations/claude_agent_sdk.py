"""Guard the Claude Agent SDK's tool calls with in-process hooks.

Install: ``pip install -c constraints.txt -e '.[claude-agent-sdk]'``.

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from policyguard.integrations.claude_agent_sdk import guard_hooks

    options = ClaudeAgentOptions(hooks=guard_hooks(guard), mcp_servers={"desk": desk_server})
    async for message in query(prompt="Refund order O1", options=options): ...

Written against ``claude-agent-sdk`` 0.2.189 (bundling Claude Code 2.1.332): its
``HookMatcher`` callbacks, which the SDK runs in this process when the Claude Code
process it drives sends a ``hook_callback`` control request.

**The same answers as the Claude Code command hook.** The SDK hands a hook callback
the event Claude Code gives a command hook (``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``, ``tool_use_id``,
``tool_response``/``error``, and ``agent_id``/``agent_type`` inside a sub-agent),
and sends the callback's dict back as that hook's JSON output. So each callback
hands the event to :meth:`ClaudeCodeHook.answer
<policyguard.integrations.claude_code.ClaudeCodeHook.answer>`: PreToolUse judges
the call on the transcript and the session record keyed by the SDK's
``session_id`` (a block is a ``deny`` whose ``permissionDecisionReason`` is the
remediation Claude reads; an escalation is ``"ask"``; a halt is a deny plus
``continue_: False``; a pass is no opinion, or ``"allow"`` with ``allow=True``),
and PostToolUse / PostToolUseFailure record what the tool returned. MCP names
(``mcp__desk__issue_refund``) map through :class:`~policyguard.integrations.claude_code.McpNames`.

**Guarantee, stated plainly.** Every tool call the matcher covers (by default
every tool, built-in and MCP, the main agent's and its sub-agents') is judged
before it runs, whatever ``allowed_tools`` or ``permission_mode`` say: a
PreToolUse deny holds even under ``bypassPermissions``. ``can_use_tool`` gives no
such promise: the SDK does not call it for a call a permission rule or mode
already allows. The callbacks never raise: an error, an unreadable event or
transcript, or no decision within ``decision_timeout_s`` answers a deny naming
the reason, and the matchers ask the CLI to block on a failed callback too
(``on_failure="block"``; Claude Code otherwise reads a failed callback as no
decision, and the call runs). Not covered: tools the matcher leaves out, and
what a tool does once it was allowed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from policyguard.guard import NO_VERIFIER_MESSAGE, Guard

from .claude_code import ClaudeCodeHook, McpNames, deny

if TYPE_CHECKING:
    from claude_agent_sdk import HookMatcher
    from claude_agent_sdk.types import HookContext, HookEvent, HookInput, HookJSONOutput

__all__ = ["DECISION_TIMEOUT_S", "HOOK_TIMEOUT_S", "PolicyGuardHooks", "guard_hooks"]

_log = logging.getLogger("policyguard")

HOOK_TIMEOUT_S = 60.0
"""The matchers' ``timeout``: how long the CLI waits for a callback."""
DECISION_TIMEOUT_S = 45.0
"""How long a PreToolUse callback waits for the guard before it answers a deny (below ``HOOK_TIMEOUT_S``)."""


class PolicyGuardHooks:
    """The PreToolUse and PostToolUse callbacks for one guard (see the module docstring).

    ``matcher``: the tool-name regex the matchers carry (``None``, the default: every
    tool; a tool the checklist does not cover is then judged as unknown, so blocked
    unless the guard has ``unknown_tools="check"``). ``allow``: a pass answers
    ``"allow"``, which skips the permission mode, allow rules and ``can_use_tool``
    (deny and ask rules still apply); by default a pass gives no opinion.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        allow: bool = False,
        names: McpNames | None = None,
        matcher: str | None = None,
        decision_timeout_s: float = DECISION_TIMEOUT_S,
        hook_timeout_s: float = HOOK_TIMEOUT_S,
    ) -> None:
        self.hook = ClaudeCodeHook(guard, allow=allow, names=names)
        self.matcher = matcher
        self.decision_timeout_s = decision_timeout_s
        self.hook_timeout_s = hook_timeout_s

    async def pre_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """A ``HookCallback`` for PreToolUse: the guard's answer; a deny on any error."""
        try:
            answer = await self._answer(input_data, tool_use_id)
        except TimeoutError:
            answer = deny(f"{NO_VERIFIER_MESSAGE} (no decision within {self.decision_timeout_s:g} s)")
        except Exception as exc:  # fail closed: an error is a deny, never a pass
            answer = deny(f"{NO_VERIFIER_MESSAGE} ({type(exc).__name__}: {' '.join(str(exc).split())[:500]})")
        return _for_sdk(answer)

    async def post_tool_use(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """A ``HookCallback`` for PostToolUse and PostToolUseFailure: records the result; never raises.

        A result that cannot be recorded is logged; the record then holds the call as
        allowed with no result, which a later write waits for and then counts as run
        with an unknown result."""
        try:
            await self._answer(input_data, tool_use_id)
        except Exception:
            _log.exception("policyguard: the result of tool call %s was not recorded", tool_use_id)
        return {}

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        """The ``hooks`` for ``ClaudeAgentOptions``: PreToolUse, PostToolUse and PostToolUseFailure.

        To add your own hooks, extend the lists (the CLI runs the matchers of one event
        concurrently, and a deny from any of them blocks the call)."""
        from claude_agent_sdk import HookMatcher

        def one(callback: Any) -> list[HookMatcher]:
            return [
                HookMatcher(matcher=self.matcher, hooks=[callback], timeout=self.hook_timeout_s, on_failure="block")
            ]

        return {
            "PreToolUse": one(self.pre_tool_use),
            "PostToolUse": one(self.post_tool_use),
            "PostToolUseFailure": one(self.post_tool_use),
        }

    async def _answer(self, input_data: Mapping[str, Any], tool_use_id: str | None) -> dict[str, Any]:
        import anyio

        event = dict(input_data)
        if tool_use_id and not event.get("tool_use_id"):
            event["tool_use_id"] = tool_use_id
        with anyio.fail_after(self.decision_timeout_s):
            # A worker thread: the guard may wait for a PostToolUse of a parallel call, which this loop delivers.
            answer: dict[str, Any] = await anyio.to_thread.run_sync(self.hook.answer, event, abandon_on_cancel=True)
        return answer


def guard_hooks(
    guard: Guard,
    *,
    allow: bool = False,
    names: McpNames | None = None,
    matcher: str | None = None,
    decision_timeout_s: float = DECISION_TIMEOUT_S,
) -> dict[HookEvent, list[HookMatcher]]:
    """``ClaudeAgentOptions(hooks=guard_hooks(guard))``: the guard's hooks (see :class:`PolicyGuardHooks`)."""
    return PolicyGuardHooks(
        guard, allow=allow, names=names, matcher=matcher, decision_timeout_s=decision_timeout_s
    ).hooks()


def _for_sdk(answer: dict[str, Any]) -> HookJSONOutput:
    """The command hook's JSON in the SDK's Python spelling (``continue`` is ``continue_``, sent as ``continue``)."""
    out = {("continue_" if key == "continue" else key): value for key, value in answer.items()}
    return out  # type: ignore[return-value]
