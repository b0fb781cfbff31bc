"""A drop-in guard for a plain tool-calling loop.

Give it your tool functions; it runs read-only ones directly, sends mutating
ones through the guard, and returns what the loop should append: the tool's
result, or - when the guard blocks - the remediation as the tool's error result
with the same call id, so the model reads it on its next turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .decision import Decision
from .guard import Guard, remediation_message
from .messages import ToolCall, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from .executor import GuardedExecutor


class ToolOutcome(BaseModel):
    """What happened to one call: the text for the model, and the decision behind it."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    tool: str
    content: str
    is_error: bool
    executed: bool
    decision: Decision


class GuardedTools:
    """Your tool functions, behind a :class:`Guard`.

    Tool functions take the call's arguments as keyword arguments and return
    anything JSON-serialisable (or a string). An exception raised by the tool is
    returned to the model as an error result, as a plain loop would.

    With an ``executor`` (a :class:`policyguard.executor.GuardedExecutor`, and a
    guard built with ``grants=``), allowed calls run only through the executor,
    which verifies the call-bound grant, consumes its nonce and keeps the ledger;
    ``tools`` is then unused.
    """

    def __init__(
        self,
        guard: Guard,
        tools: dict[str, Callable[..., Any]] | None = None,
        *,
        executor: GuardedExecutor | None = None,
    ) -> None:
        if executor is not None and guard.grants is None:
            from .errors import ConfigError

            raise ConfigError("an executor needs a guard that issues grants (Guard(..., grants=GrantIssuer(...)))")
        self.guard = guard
        self.tools = dict(tools or {})
        self.executor = executor

    def run(self, call: ToolCall, trajectory: Trajectory) -> ToolOutcome:
        """Check one call against the dialogue so far and run it if allowed."""
        decision = self.guard.check(call, trajectory)
        if decision.outcome != "allow":
            remediation = remediation_message(call, decision).content or ""
            return _outcome(call, decision, remediation, is_error=True, executed=False)
        if self.executor is not None:
            return self._through_executor(call, decision)
        function = self.tools.get(call.name)
        if function is None:
            self.guard.record_execution(decision, executed=False, error="unknown tool")
            return _outcome(call, decision, f"Error: unknown tool {call.name!r}", is_error=True, executed=False)
        self.guard.record_execution(decision, executed=True)
        try:
            result = function(**call.arguments)
        except Exception as exc:  # the tool's own failure goes back to the model
            return _outcome(call, decision, f"Error: {exc}", is_error=True, executed=True)
        return _outcome(call, decision, _text(result), is_error=False, executed=True)

    def _through_executor(self, call: ToolCall, decision: Decision) -> ToolOutcome:
        assert self.executor is not None
        result = self.executor.execute(call, decision.grant, principal=self.guard.principal, resource=None)
        if not (result.executed or result.replayed_from_ledger):
            self.guard.record_execution(decision, executed=False, error=result.reason)
            refusal = f"Error: the call was refused at execution ({result.reason}). Do not retry it unchanged."
            return _outcome(call, decision, refusal, is_error=True, executed=False)
        if result.executed:
            self.guard.record_execution(decision, executed=True, emit_event=self.executor.trace is None)
        if result.error is not None:
            return _outcome(call, decision, f"Error: {result.error}", is_error=True, executed=result.executed)
        return _outcome(call, decision, _text(result.result), is_error=False, executed=result.executed)

    def openai_chat(self, tool_call: dict[str, Any], messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One OpenAI Chat Completions tool call in, the ``role: tool`` message to append out.

        ``messages`` is the conversation so far, including the assistant message
        that carries ``tool_call``.
        """
        from .formats import to_trajectory
        from .formats.openai_chat import tool_call_from_openai, tool_error_message

        call = tool_call_from_openai(tool_call)
        outcome = self.run(call, to_trajectory(list(messages), format="openai_chat"))
        if outcome.is_error and not outcome.executed:
            return tool_error_message(outcome.call_id, outcome.content)
        return {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.content}


def _text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, default=str)


def _outcome(call: ToolCall, decision: Decision, content: str, *, is_error: bool, executed: bool) -> ToolOutcome:
    return ToolOutcome(
        call_id=call.id, tool=call.name, content=content, is_error=is_error, executed=executed, decision=decision
    )
