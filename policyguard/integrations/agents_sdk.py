"""Guard the function tools of an OpenAI Agents SDK agent (``pip install 'policyguard[agents]'``).

::

    from agents import Agent, Runner
    from policyguard.integrations.agents_sdk import guard_agent

    agent = guard_agent(Agent(name="support", tools=[get_order, issue_refund]), guard)
    result = await Runner.run(agent, "Please refund order O1.")

**The seam: a tool input guardrail, fed by agent hooks.** Every function tool
the checklist does not declare ``mutating: false`` gets a tool input guardrail,
appended after the tool's own, so it runs right before the tool. Read-only tools
are left as they are: no guardrail, no ``Guard.check``. The guardrail has the
SDK's three outcomes, which are ours: ``allow`` runs the tool;
``reject_content`` sends the remediation to the model as the tool's result and
the run goes on; ``raise_exception`` stops the run. Wrapping ``on_invoke_tool``
instead could not stop a run: an exception there becomes a tool error message.

The guardrail's own data does not carry the run's conversation:
``ToolContext.turn_input`` is the input the run started with, without the calls
and results of its earlier turns. So the guarded agent also carries
:class:`agents.AgentHooks` whose ``on_llm_start`` and ``on_llm_end`` keep what
the model was shown (instructions and input items, after any
``call_model_input_filter``) and what it answered. The guardrail finds its turn
by the tool call object the SDK hands it, which is the object of that very
response, and the guard judges the call on exactly that conversation, read by
the OpenAI Responses reader (:mod:`policyguard.formats.openai_responses`) with
its strictness: a call id used twice or answered twice, or an item it cannot
read (a hosted tool call), blocks every guarded call of the run and names the
item. A call the hooks did not see (a run resumed from a ``RunState``, as
after ``needs_approval``) is blocked, and so is a call during which the adapter
or the guard raised.

**Outcomes.** A block answers the call with ``"Error: <remediation>"``; the tool
function never runs. A halt makes ``Runner.run`` raise
``agents.ToolInputGuardrailTripwireTriggered``, whose ``output.output_info`` is
the :class:`~policyguard.decision.Decision`. Decisions also appear in
``result.tool_input_guardrail_results`` and in the guard's trace.

**Parallel calls.** The SDK runs the calls of one model message concurrently,
so each guarded call is judged on the conversation up to that message; a
guarded call that follows another guarded call in the same message is blocked
("make one change at a time"), since it would be judged on a state the first
one may change. A call whose arguments are not JSON is blocked; in later turns
it is read with empty arguments and its output as a failure, so it never
becomes a fact and the run can go on.

**Refused when guarding** (:class:`~policyguard.errors.ConfigError`): tools
that are not ``FunctionTool`` (hosted, computer and shell tools take no input
guardrail), ``mcp_servers`` (their tools appear only at run time; put
``policyguard mcp-proxy`` in front of the server instead) and ``Handoff``
objects. Agents named in ``handoffs`` are guarded with the same guard.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any

from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

from ..decision import Decision
from ..errors import ConfigError, FormatError
from ..formats import to_trajectory
from ..formats._common import CallIds, error_text, parse_arguments, plain
from ..guard import NO_VERIFIER_MESSAGE, Guard, _plain_name, remediation_message
from ..messages import ToolCall, Trajectory

__all__ = ["GUARDRAIL_NAME", "AgentsSDKGuard", "guard_agent"]

GUARDRAIL_NAME = "policyguard"
ONE_CHANGE = (
    "Call {earlier!r} ({tool}) comes before this call in the same message and may change what this call "
    "depends on, so this call was not performed. Make one change at a time: send it again on its own."
)
UNSEEN_TURN = (
    "The policy check could not see the conversation that led to this call, so it was not performed. "
    "Do not retry it now; tell the user it cannot be completed at the moment."
)
_RUNS_KEPT = 1024  # runs whose last model turn is remembered; the least recently active go first


@dataclasses.dataclass
class _Turn:
    """One model call: what the model was shown and what it answered; converted on first need."""

    system: str | None
    input: list[Any]
    output: list[Any]
    trajectory: Trajectory | None = None
    problem: str | None = None


class AgentsSDKGuard:
    """One :class:`Guard` for the agents it guards; keeps the model turns their guardrails read."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        # per run (by its context wrapper): the model call in progress, and the calls of its last turn
        self._runs: OrderedDict[int, tuple[Any, tuple[str | None, list[Any]] | None, list[int]]] = OrderedDict()
        self._calls: dict[int, tuple[Any, _Turn]] = {}
        self._lock = threading.Lock()
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(self._check, name=GUARDRAIL_NAME)

    @property
    def remembered_calls(self) -> int:
        """How many tool calls of model turns are kept for their guardrails (the runs' last turns only)."""
        with self._lock:
            return len(self._calls)

    def read_only(self, tool_name: str) -> bool:
        """Whether the checklist declares ``tool_name`` read-only (such a tool runs unguarded)."""
        return _plain_name(tool_name) and not self.guard.checklist.is_mutating(tool_name)

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """A guarded clone of ``agent`` and of the agents it hands off to; ``agent`` itself is unchanged."""
        originals: dict[int, Agent[Any]] = {}
        pending = [agent]
        while pending:
            current = pending.pop()
            if id(current) in originals:
                continue
            _refuse_unguardable(current)
            originals[id(current)] = current
            pending.extend(current.handoffs)  # type: ignore[arg-type]
        clones = {key: self._clone(original) for key, original in originals.items()}
        for key, original in originals.items():
            clones[key].handoffs = [clones[id(target)] for target in original.handoffs]
        return clones[id(agent)]

    def _clone(self, agent: Agent[Any]) -> Agent[Any]:
        inner = agent.hooks.inner if isinstance(agent.hooks, _GuardHooks) else agent.hooks
        tools = [tool if self.read_only(tool.name) else self._guarded(tool) for tool in agent.tools]
        return agent.clone(tools=tools, hooks=_GuardHooks(self, inner))

    def check_still_guarded(self, agent: Agent[Any]) -> None:
        """Raise :class:`ConfigError` when ``agent`` was changed after guarding so a call could skip the guard.

        The hooks run this before every model call: a mutating tool added
        without the guardrail, or a handoff to an agent this guard does not
        guard, stops the run instead of running unchecked.
        """
        _refuse_unguardable(agent)
        for tool in agent.tools:
            if not self.read_only(tool.name) and self.guardrail not in (tool.tool_input_guardrails or []):  # type: ignore[union-attr]
                raise ConfigError(
                    f"agent {agent.name!r}: tool {tool.name!r} was added without the guard; guard the agent again"
                )
        for target in agent.handoffs:
            hooks = getattr(target, "hooks", None)
            if not isinstance(hooks, _GuardHooks) or hooks.owner is not self:
                raise ConfigError(
                    f"agent {agent.name!r}: the handoff to {getattr(target, 'name', target)!r} is not guarded; "
                    "guard the agent again"
                )

    def _guarded(self, tool: Any) -> FunctionTool:
        guardrails = [g for g in tool.tool_input_guardrails or [] if g is not self.guardrail]
        return dataclasses.replace(tool, tool_input_guardrails=[*guardrails, self.guardrail])

    # -- the hooks' side ----------------------------------------------------

    def _started(self, context: Any, system: str | None, items: list[Any]) -> None:
        with self._lock:
            previous = self._runs.pop(id(context), None)
            if previous is not None:  # the calls of the run's previous turn have all run by now
                self._forget(previous[2])
            self._runs[id(context)] = (context, (system, list(items)), [])
            while len(self._runs) > _RUNS_KEPT:
                self._forget(self._runs.popitem(last=False)[1][2])

    def _ended(self, context: Any, output: list[Any]) -> None:
        with self._lock:
            entry = self._runs.get(id(context))
            if entry is None or entry[1] is None:
                return  # a response without its start: its calls stay unseen and are blocked
            (system, items), keys = entry[1], entry[2]
            turn = _Turn(system=system, input=items, output=list(output))
            for item in turn.output:
                if _kind(item) == "function_call":
                    self._calls[id(item)] = (item, turn)
                    keys.append(id(item))
            self._runs[id(context)] = (context, None, keys)

    def _forget(self, keys: list[int]) -> None:
        for key in keys:
            self._calls.pop(key, None)

    # -- the guardrail's side -----------------------------------------------

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """The guardrail: never raises for a call it cannot judge, it blocks it (a halt raises in the SDK)."""
        try:
            return await self._judge(data)
        except Exception as exc:  # fail closed: an error in the adapter or the guard is a block, not a crash
            context = data.context
            call = ToolCall(id=str(context.tool_call_id or "?"), name=str(context.tool_name or "?"))
            return self._refuse(call, NO_VERIFIER_MESSAGE, f"{type(exc).__name__}: {exc}")

    async def _judge(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        raw = context.tool_call
        with self._lock:
            found = self._calls.get(id(raw)) if raw is not None else None
        if found is None or found[0] is not raw:
            call = ToolCall(id=context.tool_call_id or "?", name=context.tool_name or "?")
            return self._refuse(call, UNSEEN_TURN, "the guard's hooks did not see the model turn of this call")
        turn = found[1]
        call, problem = _pending_call(raw, context.tool_namespace)
        if problem is not None:
            return self._refuse(call, problem, problem)
        earlier = self._earlier_change(raw, turn)
        if earlier is not None:
            return self._refuse(call, earlier, "one change at a time")
        trajectory = _converted(turn, context.turn_input)
        if trajectory is None:
            message = (
                f"The conversation could not be read ({turn.problem}), so no fact in it can be trusted and this call "
                "was not performed."
            )
            return self._refuse(call, message, turn.problem or "unreadable conversation")
        decision = await self.guard.acheck(call, trajectory)
        return self._outcome(call, decision)

    def _earlier_change(self, raw: Any, turn: _Turn) -> str | None:
        """Why an earlier item of the same message stops this call, or None."""
        for item in turn.output:
            if item is raw:
                return None
            if _kind(item) != "function_call":
                continue
            name = _field(item, "name")
            if not isinstance(name, str) or not self.read_only(name):
                return ONE_CHANGE.format(earlier=_field(item, "call_id"), tool=name)
        return None

    def _outcome(self, call: ToolCall, decision: Decision) -> ToolGuardrailFunctionOutput:
        if decision.outcome == "allow":
            self.guard.record_execution(decision, executed=True)
            return ToolGuardrailFunctionOutput.allow(output_info=decision)
        if decision.outcome == "halt":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=decision)
        text = remediation_message(call, decision).content or ""
        return ToolGuardrailFunctionOutput.reject_content(error_text(text, True), output_info=decision)

    def _refuse(self, call: ToolCall, message: str, error: str) -> ToolGuardrailFunctionOutput:
        """A block decided before the guard could judge the call (as GuardedTools refuses a call out of order)."""
        args = call.args_sha256_or_none() or "unhashable"
        decision = Decision.block("bad_call", message, error=error, call_id=call.id, tool=call.name, args_sha256=args)
        return ToolGuardrailFunctionOutput.reject_content(error_text(message, True), output_info=decision)


class _GuardHooks(AgentHooks[Any]):
    """Records each model turn for the guardrail, then calls the agent's own hooks."""

    def __init__(self, owner: AgentsSDKGuard, inner: AgentHooks[Any] | None) -> None:
        self.owner = owner
        self.inner = inner

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self.owner.check_still_guarded(agent)
        self.owner._started(context, system_prompt, input_items)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.owner._ended(context, response.output)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


def guard_agent(agent: Agent[Any], guard: Guard) -> Agent[Any]:
    """A clone of ``agent`` whose mutating function tools go through ``guard`` (see the module docstring)."""
    return AgentsSDKGuard(guard).agent(agent)


def _refuse_unguardable(agent: Agent[Any]) -> None:
    others = [getattr(tool, "name", type(tool).__name__) for tool in agent.tools if not isinstance(tool, FunctionTool)]
    if others:
        raise ConfigError(
            f"agent {agent.name!r}: tools {others} are not function tools, so no input guardrail can check them; "
            "remove them or wrap them as function tools"
        )
    if agent.mcp_servers:
        raise ConfigError(
            f"agent {agent.name!r}: MCP server tools appear only at run time and cannot be guarded here; "
            "run the server behind `policyguard mcp-proxy` and connect the agent to the proxy"
        )
    handoffs = [h for h in agent.handoffs if not isinstance(h, Agent)]
    if handoffs:
        names = [getattr(h, "agent_name", type(h).__name__) for h in handoffs]
        raise ConfigError(
            f"agent {agent.name!r}: Handoff objects {names} hide the agent they hand off to, so its tools cannot "
            "be guarded; list the target Agent itself in handoffs"
        )


def _kind(item: Any) -> Any:
    return _field(item, "type")


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _pending_call(raw: Any, namespace: str | None) -> tuple[ToolCall, str | None]:
    """The call to judge, or the reason it cannot be judged (arguments that are not a JSON object)."""
    call_id, name = _field(raw, "call_id"), _field(raw, "name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        return ToolCall(id=str(call_id or "?"), name=str(name or "?")), "The call has no id or no name."
    if namespace:
        name = f"{namespace}.{name}"
    try:
        arguments = parse_arguments(_field(raw, "arguments"), "the call", call_id)
    except FormatError as exc:
        reason = f"{exc}. The call was not run; send its arguments as one JSON object."
        return ToolCall(id=call_id, name=name), reason
    return ToolCall(id=call_id, name=name, arguments=arguments), None


def _converted(turn: _Turn, caller_input: Any) -> Trajectory | None:
    """The turn's conversation as a Trajectory (cached), or None with ``turn.problem`` set.

    The run's own input list is read too: the SDK drops all but the latest of
    items that share an id before the model (and the hooks) see them, which
    would pair a result with a call by position.
    """
    if turn.trajectory is not None or turn.problem is not None:
        return turn.trajectory
    try:
        _check_caller_ids(caller_input)
        items = _readable([*plain(turn.input), *plain(turn.output)])
        turn.trajectory = to_trajectory(items, "openai_responses", system=turn.system)
    except FormatError as exc:
        turn.problem = str(exc)
    return turn.trajectory


def _check_caller_ids(items: Any) -> None:
    """Refuse a run input that uses a call id twice or answers one twice.

    Stricter than the readers (no reuse after an answer): the SDK keeps only the
    latest item of an id, so the model may not have seen what the guard would read.
    """
    if not isinstance(items, list):
        return
    ids = CallIds("input item", reuse_after_answer=False)
    for index, item in enumerate(items):
        kind, call_id = _kind(item), _field(item, "call_id")
        if kind == "function_call" and isinstance(call_id, str):
            ids.call(call_id, index)
        elif kind == "function_call_output" and isinstance(call_id, str):
            ids.result(call_id, index)


def _readable(items: list[Any]) -> list[Any]:
    """Items with unreadable call arguments emptied and their outputs marked failed (never a fact)."""
    unreadable: set[str] = set()
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
            try:
                parse_arguments(item.get("arguments"), "item", item["call_id"])
            except FormatError:
                unreadable.add(item["call_id"])
                item = {**item, "arguments": "{}"}
        elif (
            isinstance(item, dict) and item.get("type") == "function_call_output" and item.get("call_id") in unreadable
        ):
            item = {**item, "is_error": True}
        kept.append(item)
    return kept
