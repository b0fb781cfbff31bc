"""Guard a Pydantic AI agent's tool calls with a capability (``pip install -c constraints.txt -e '.[pydantic-ai]'``).

::

    from pydantic_ai import Agent
    from policyguard.integrations.pydantic_ai import PolicyGuardCapability

    agent = Agent("openai:gpt-4.1", tools=[get_order, issue_refund], capabilities=[PolicyGuardCapability(guard)])

Written against ``pydantic-ai-slim`` 2.68 (the range pinned in the ``pydantic-ai`` extra):
its capabilities' ``before_tool_execute`` / ``after_tool_execute`` /
``on_tool_execute_error`` hooks, ``RunContext.messages`` and ``RunContext.conversation_id``.

**Before a tool runs** (``before_tool_execute``) the guard judges the call with
``Guard.acheck(..., session=ctx.conversation_id)`` on the run's messages
(``RunContext.messages``, read by :func:`trajectory`). Then

- a pass returns the arguments: the tool runs;
- a block raises ``ModelRetry(remediation)``: the tool does not run and the model
  reads the remediation as a retry prompt (``on_block="skip"`` raises
  ``SkipToolExecution`` with ``"Error: <remediation>"`` as the tool's result instead,
  which spends no retry);
- an escalation raises ``ApprovalRequired`` (the decision's message in its metadata):
  the run ends with ``DeferredToolRequests`` in ``result.output`` (give the agent
  ``output_type=[str, DeferredToolRequests]``), and resumes with
  ``agent.run(message_history=..., deferred_tool_results=DeferredToolResults(approvals={id: True}))``;
  the approved call then runs without a second check (``ctx.tool_call_approved``);
- a halt raises :class:`GuardHalted`, which ends the run;
- an error in the guard or in reading the messages is a block (fail closed).

**After it ran** (``after_tool_execute``) its result is recorded in the session
record (``Guard.record_result``), so facts come from what the tool returned; a tool
that raised (``on_tool_execute_error``) is recorded as *unknown*: it counts as done
and is no fact.

**The record** is keyed by ``RunContext.conversation_id``, which Pydantic AI takes
from ``agent.run(conversation_id=...)``, else from the message history, else new:
runs that continue one history share one record, so a write the history no longer
shows (a history processor trimmed or summarised it) still counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, SkipToolExecution
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from policyguard.decision import Decision
from policyguard.errors import PolicyGuardError
from policyguard.guard import NO_VERIFIER_MESSAGE, Guard, remediation_message
from policyguard.trajectory.formats.common import error_text
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from ._resulttext import result_text

__all__ = ["GuardHalted", "PolicyGuardCapability", "trajectory"]

NO_OUTPUT = "the tool raised, so its result is unknown"


class GuardHalted(PolicyGuardError):
    """The guard halted the run at a tool call; ``decision`` says why."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or "the policy guard halted the run")
        self.decision = decision


class PolicyGuardCapability(AbstractCapability[Any]):
    """Checks every tool call of the agent with ``guard`` before it runs and records its result after."""

    def __init__(self, guard: Guard, *, on_block: Literal["retry", "skip"] = "retry") -> None:
        self.guard = guard
        self.on_block = on_block

    async def before_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: Any, args: Any) -> Any:
        if ctx.tool_call_approved:
            return args  # a person approved this very call after the guard escalated it
        pending = ToolCall(id=call.tool_call_id, name=call.tool_name)
        try:
            pending = ToolCall(
                id=call.tool_call_id, name=call.tool_name, arguments=call.args_as_dict(raise_if_invalid=True)
            )
            decision = await self.guard.acheck(pending, trajectory(ctx.messages), session=_session(ctx))
        except Exception as exc:  # fail closed: the call does not run
            self._block(f"{NO_VERIFIER_MESSAGE} ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})")
        if decision.outcome == "allow":
            self.guard.record_execution(decision, executed=True)
            return args
        if decision.outcome == "escalate":
            raise ApprovalRequired(metadata={"policyguard": decision.message, "approval_id": decision.approval_id})
        if decision.outcome == "halt":
            raise GuardHalted(decision)
        self._block(remediation_message(pending, decision).content or NO_VERIFIER_MESSAGE)

    def _block(self, text: str) -> Any:
        if self.on_block == "skip":
            raise SkipToolExecution(error_text(text, True))
        raise ModelRetry(text)

    async def after_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: Any, args: Any, result: Any
    ) -> Any:
        self._tell(ctx, call.tool_call_id, result_text(result))
        return result

    async def on_tool_execute_error(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: Any, args: Any, error: Exception
    ) -> Any:
        if not isinstance(error, (ModelRetry, SkipToolExecution, ApprovalRequired, GuardHalted)):
            self._tell(ctx, call.tool_call_id, None)
        raise error

    def _tell(self, ctx: RunContext[Any], call_id: str, text: str | None) -> None:
        """Record the call's fate; a store that cannot take it makes the session's next write count it unknown."""
        try:
            if text is None:
                self.guard.record_unknown(_session(ctx), call_id, NO_OUTPUT)
            else:
                self.guard.record_result(_session(ctx), call_id, text)
        except Exception:
            pass


def _session(ctx: RunContext[Any]) -> str:
    if not ctx.conversation_id:
        raise PolicyGuardError("the run has no conversation_id, so the guard has no record to judge on")
    return ctx.conversation_id


def trajectory(messages: Sequence[ModelMessage]) -> Trajectory:
    """Pydantic AI messages as the guard's :class:`Trajectory`.

    System and user prompts, the model's text and tool calls, and tool returns are
    kept; a return whose ``outcome`` is not ``success`` (``retried`` after a block or
    a validation error, ``failed``, ``denied``, ``interrupted``) is a failed result,
    so never a fact. Retry feedback with no tool is the framework's, not the user's,
    and other parts (thinking, files, native tools) are dropped: dropping never adds
    a fact. The instructions, sent with every request, are one system message first.
    """
    out: list[Message] = []
    instructions = [m.instructions for m in messages if isinstance(m, ModelRequest) and m.instructions]
    if instructions:  # sent with every request; the model is shown the latest, once, before the dialogue
        out.append(Message(role="system", content=instructions[-1]))
    for message in messages:
        if isinstance(message, ModelResponse):
            texts = [p.content for p in message.parts if isinstance(p, TextPart)]
            calls = [
                ToolCall(id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_dict())
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            out.append(Message(role="assistant", content="\n".join(texts) if texts else None, tool_calls=calls))
        elif isinstance(message, ModelRequest):
            out.extend(_request(message))
    return Trajectory(messages=out)


def _request(message: ModelRequest) -> list[Message]:
    out: list[Message] = []
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            out.append(Message(role="system", content=part.content))
        elif isinstance(part, UserPromptPart):
            content = part.content if isinstance(part.content, str) else "\n".join(
                item for item in part.content if isinstance(item, str)
            )  # fmt: skip
            out.append(Message(role="user", content=content))
        elif isinstance(part, ToolReturnPart):
            failed = part.outcome != "success"
            out.append(Message(role="tool", tool_call_id=part.tool_call_id, name=part.tool_name,
                               content=error_text(part.model_response_str(), failed), is_error=failed))  # fmt: skip
    return out
