"""PolicyGuard as LangChain agent middleware (``langchain.agents.create_agent``).

Install the extra first: ``pip install 'policyguard[langchain]'``. ::

    from langchain.agents import create_agent
    from policyguard.integrations.langchain import PolicyGuardMiddleware

    agent = create_agent(model, tools, middleware=[PolicyGuardMiddleware(guard)])

The seam is LangChain's tool-call wrapping hook (``wrap_tool_call``, and
``awrap_tool_call`` under ``ainvoke``/``astream``): it runs inside the agent's
tool node, once per tool call, before the tool, and sees the agent state.

- A read-only tool (``mutating: false`` in the checklist) runs at once; the
  dialogue is not even read.
- Any other call is checked by :meth:`Guard.check` (``Guard.acheck`` in the
  async hook) against the state's messages, read with the LangChain reader of
  :mod:`policyguard.formats.langchain`: the verifier sees the whole conversation
  up to the ``AIMessage`` that made the call.
- Allowed: the tool runs with exactly the arguments that were checked.
- Blocked: the tool never runs; the call is answered with
  ``ToolMessage(content=<remediation>, status="error")``, which the model reads
  on its next turn. So are a call whose arguments cannot be read and a state
  whose messages cannot be read faithfully (a reused call id, say): fail closed.
- Halt: :class:`GuardHalted` is raised. LangChain's tool node re-raises it (its
  default error handling only turns tool-invocation errors into messages), so
  ``agent.invoke`` / ``ainvoke`` ends with it; the caller catches it, and
  ``exc.decision`` says why.

Order: middleware listed first wraps the others. Put this middleware **last** in
``middleware=[...]`` so no other middleware can change a call after it was
checked. Several calls in one ``AIMessage`` run concurrently in LangChain's tool
node; each is judged on the state as it stands, without its siblings' results.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ToolCallRequest
    from langchain_core.messages import ToolCall as LangChainToolCall
    from langchain_core.messages import ToolMessage
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "policyguard.integrations.langchain needs LangChain >= 1: pip install 'policyguard[langchain]'"
    ) from exc

from ..decision import Decision
from ..errors import FormatError
from ..formats.langchain import read as read_langchain
from ..formats.langchain import tool_call_from_langchain
from ..guard import Guard, remediation_message
from ..messages import ToolCall, Trajectory

__all__ = ["GuardHalted", "PolicyGuardMiddleware"]


class GuardHalted(Exception):
    """The guard decided the run must stop; raised out of ``agent.invoke``/``ainvoke``.

    A control-flow outcome, not a :class:`~policyguard.errors.PolicyGuardError`:
    ``decision`` is the guard's :class:`Decision` (outcome ``"halt"``).
    """

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        where = f"call {decision.call_id!r} ({decision.tool})"
        super().__init__(f"PolicyGuard halted the run at {where}: {decision.message}")


class PolicyGuardMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Checks every mutating tool call of a ``create_agent`` agent with ``guard`` before the tool runs."""

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard
        self.tools = []

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Any],
    ) -> Any:
        """Check the call on the agent state's messages; run it, answer it with the remediation, or halt."""
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        call, trajectory = prepared
        try:
            decision = self.guard.check(call, trajectory)
        except Exception as exc:  # a guard that cannot decide never lets the call through
            decision = _crash(call, exc)
        return self._act(request, call, decision, handler)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        """Async :meth:`wrap_tool_call`: the verifier is awaited (``Guard.acheck``)."""
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        call, trajectory = prepared
        try:
            decision = await self.guard.acheck(call, trajectory)
        except Exception as exc:
            decision = _crash(call, exc)
        outcome = self._act(request, call, decision, None)
        if isinstance(outcome, ToolCallRequest):
            return await handler(outcome)
        return outcome

    def _prepare(self, request: ToolCallRequest) -> tuple[ToolCall, Trajectory] | ToolMessage:
        """The call and the dialogue to judge it on, or the error answer when either cannot be read.

        A read-only call gets an empty dialogue: no stage reads it, so it is not converted.
        """
        call, refusal = _read_call(request)
        if call is None:
            return _error_message(request, refusal)
        if not self.guard.checklist.is_mutating(call.name):
            return call, Trajectory()
        trajectory, refusal = _read_state(request)
        if trajectory is None:
            return _error_message(request, refusal)
        return call, trajectory

    def _act(
        self,
        request: ToolCallRequest,
        call: ToolCall,
        decision: Decision,
        handler: Callable[[ToolCallRequest], Any] | None,
    ) -> Any:
        """The block's ToolMessage, a halt, or (allow) the handler's result - or the request to run, async."""
        if decision.outcome == "halt":
            raise GuardHalted(decision)
        if decision.outcome != "allow":
            return _error_message(request, remediation_message(call, decision).content or "")
        self.guard.record_execution(decision, executed=True)
        checked = request.override(tool_call=_as_langchain_call(call))
        return checked if handler is None else handler(checked)


def _crash(call: ToolCall, exc: Exception) -> Decision:
    return Decision.block(
        "guard",
        "The policy check for this action failed, so it was not performed. "
        "Do not retry it now; explain that it cannot be completed at the moment.",
        error=f"{type(exc).__name__}: {exc}",
        call_id=call.id,
        tool=call.name,
    )


def _read_call(request: ToolCallRequest) -> tuple[ToolCall | None, str]:
    try:
        return tool_call_from_langchain(request.tool_call), ""
    except FormatError as exc:
        return None, f"Error: the call was not run: {exc}. Send its arguments as one JSON object of plain values."


def _read_state(request: ToolCallRequest) -> tuple[Trajectory | None, str]:
    """The state's messages as a trajectory, or why they cannot be trusted (the call is then refused)."""
    state = request.state
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    try:
        if not isinstance(messages, (list, tuple)):
            raise FormatError("the agent state has no message list")
        return read_langchain(list(messages)), ""
    except FormatError as exc:
        return None, (
            f"Error: the call was not run because the conversation could not be checked ({exc}). "
            "Do not retry it; tell the user it cannot be completed now."
        )


def _as_langchain_call(call: ToolCall) -> LangChainToolCall:
    """The checked call as LangChain's tool call dict, with its own copy of the arguments."""
    return {"name": call.name, "args": copy.deepcopy(call.arguments), "id": call.id, "type": "tool_call"}


def _error_message(request: ToolCallRequest, text: str) -> ToolMessage:
    raw = request.tool_call if isinstance(request.tool_call, Mapping) else {}
    call_id = raw.get("id")
    name = raw.get("name")
    return ToolMessage(
        content=text,
        tool_call_id=call_id if isinstance(call_id, str) else "",
        name=name if isinstance(name, str) else None,
        status="error",
    )
