"""Guard the function tools of an OpenAI Agents SDK agent (``pip install -c constraints.txt -e '.[agents]'``).

::

    from agents import Agent, Runner, SQLiteSession
    from policyguard.integrations.agents_sdk import guard_agent, guarded_session

    agent = guard_agent(Agent(name="support", tools=[get_order, issue_refund]), guard)
    result = await Runner.run(agent, "Please refund order O1.", session=guarded_session(SQLiteSession("user-42")))

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
the OpenAI Responses reader (:mod:`policyguard.trajectory.formats.openai_responses`) with
its strictness: a call id used twice or answered twice, or an item it cannot
read (a hosted tool call), blocks every guarded call of the run and names the
item. A call the hooks did not see (a run resumed from a ``RunState``, as
after ``needs_approval``) is blocked, and so is a call during which the adapter
or the guard raised.

**The guard's own reads.** The agent's read-only function tools are handed to the guard as
``fetch=``: a write blocked only for a read the conversation lacks is judged on the read
the guard makes itself (the tool's ``on_invoke_tool``, awaited on the run's loop). The read goes to
the guard's record and trace; the run's items and the model's input are not changed.

**Outcomes.** A block answers the call with ``"Error: <remediation>"``; the tool
function never runs. A halt makes ``Runner.run`` raise
``agents.ToolInputGuardrailTripwireTriggered``, whose ``output.output_info`` is
the :class:`~policyguard.decision.Decision`. Decisions also appear in
``result.tool_input_guardrail_results`` and in the guard's trace.

**The conversation is the guard's own record.** Each guarded call is checked
with ``session=``: the guard keeps an append-only record of the conversation
(:mod:`policyguard.session`) and judges the call on it merged with what the
model was shown, so a write the model is no longer sent (a session's
``SessionSettings(limit=N)`` window, a compaction) still counts. The session is
keyed by

- the **SDK session's id** when the run's session is wrapped by
  :func:`guarded_session` (``Runner.run(..., session=guarded_session(s))``):
  the SDK hands the run's context to sessions that accept it, which is how the
  guard learns which conversation a run belongs to. One record per session id,
  across runs;
- otherwise **the run** (its ``RunContextWrapper``): a run never shares a
  record with another, so an unwrapped session's window still hides older runs'
  writes from the guard.

Each allowed call's fate goes into the record: the tool's output, read by a
tool output guardrail placed first (an output starting with ``"Error:"`` is a
failure; the SDK's own error text is not, so a tool that failed that way still
counts as done). A call whose output never came (the tool raised, was
cancelled, the run stopped) is recorded as *unknown* at the next model call of
its session: it counts as done, and is no fact until read again. The output
guardrail always allows; it shows in ``result.tool_output_guardrail_results``.

**Parallel calls.** The SDK runs the calls of one model message concurrently;
the guard judges the writes of a session one at a time, each once the earlier
one has run, with its result in the record. A call whose arguments are not
JSON is blocked; in later turns it is read with empty arguments and its output
as a failure, so it never becomes a fact and the run can go on.

**Refused when guarding** (:class:`~policyguard.errors.ConfigError`): a tool the checklist names that
neither the agent nor an agent it hands off to has (:func:`~policyguard.integrations.hosttools.cross_check`;
their tools no checklist entry covers are judged as unknown, and a warning lists them); tools
that are not ``FunctionTool`` (hosted, computer and shell tools take no input
guardrail), ``mcp_servers`` (their tools appear only at run time; put
``policyguard mcp-proxy`` in front of the server instead) and ``Handoff``
objects. Agents named in ``handoffs`` are guarded with the same guard.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
import uuid
import weakref
from collections import OrderedDict
from typing import Any

from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    ItemHelpers,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tool_context import ToolContext

from policyguard.decision import Decision
from policyguard.errors import ConfigError, FormatError
from policyguard.gate.facts import FETCH_ID_PREFIX
from policyguard.guard import NO_VERIFIER_MESSAGE, Guard, remediation_message
from policyguard.guard.calls import plain_name
from policyguard.guard.fetching import Answer
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.formats.common import CallIds, error_text, parse_arguments, plain
from policyguard.trajectory.messages import ToolCall, Trajectory

from .hostfetch import LoopFetcher, as_answer
from .hosttools import cross_check

__all__ = ["GUARDRAIL_NAME", "AgentsSDKGuard", "GuardedSession", "guard_agent", "guarded_session"]

GUARDRAIL_NAME = "policyguard"
UNSEEN_TURN = (
    "The policy check could not see the conversation that led to this call, so it was not performed. "
    "Do not retry it now; tell the user it cannot be completed at the moment."
)
_RUNS_KEPT = 1024  # runs whose last model turn is remembered; the least recently active go first
_ALLOWED_KEPT = 4096  # allowed calls waiting for their output; past it the oldest is left to the guard's wait
NO_OUTPUT = "no output was reported for this call (the tool raised, was cancelled, or the run stopped)"


class _RunKeys:
    """Which guard session each run (its ``RunContextWrapper``) belongs to: its SDK session's id, or its own."""

    def __init__(self) -> None:
        self._keys: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._lock = threading.Lock()

    def bind(self, context: Any, session_id: str) -> None:
        """The run of ``context`` uses the SDK session ``session_id``."""
        with self._lock:
            self._keys[id(context)] = (weakref.ref(context, self._forget(id(context))), session_id)

    def key(self, context: Any) -> str:
        """The session of the run of ``context``: its bound SDK session, or a new id kept for the run."""
        with self._lock:
            found = self._keys.get(id(context))
            if found is not None and found[0]() is context:
                return found[1]
            key = f"run-{uuid.uuid4().hex}"
            self._keys[id(context)] = (weakref.ref(context, self._forget(id(context))), key)
            return key

    def _forget(self, key: int) -> Any:
        def forget(ref: weakref.ref[Any]) -> None:
            with self._lock:
                found = self._keys.get(key)
                if found is not None and found[0] is ref:
                    del self._keys[key]

        return forget


_run_keys = _RunKeys()


class GuardedSession:
    """An Agents SDK ``Session`` that tells the guard which conversation a run belongs to.

    Pass it as ``Runner.run(..., session=guarded_session(session))``: each run
    that reads it is judged on the guard's record for ``session.session_id``.
    Everything else is the wrapped session's.
    """

    def __init__(self, session: Any) -> None:
        self.inner = session

    @property
    def session_id(self) -> str:
        return str(self.inner.session_id)

    @property
    def session_settings(self) -> Any:
        return getattr(self.inner, "session_settings", None)

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        return list(await self._call(self.inner.get_items, limit, wrapper=wrapper))

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        await self._call(self.inner.add_items, items, wrapper=wrapper)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        return await self._call(self.inner.pop_item, wrapper=wrapper)

    async def clear_session(self, *, wrapper: Any = None) -> None:
        await self._call(self.inner.clear_session, wrapper=wrapper)

    def __getattr__(self, name: str) -> Any:  # compaction and other optional methods of the wrapped session
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def _call(self, method: Any, *args: Any, wrapper: Any) -> Any:
        """``method(*args)`` of the wrapped session (with ``wrapper`` when it takes one), after binding the run."""
        if wrapper is None:
            return await method(*args)
        _run_keys.bind(wrapper, self.session_id)  # the SDK hands its run context to sessions that take ``wrapper``
        if _takes_wrapper(method):
            return await method(*args, wrapper=wrapper)
        return await method(*args)


def _takes_wrapper(method: Any) -> bool:
    try:
        return "wrapper" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def guarded_session(session: Any) -> GuardedSession:
    """``session`` for ``Runner.run(session=...)``, so the guard keys its record by the session's id.

    An ``OpenAIConversationsSession`` is refused (:class:`ConfigError`): the SDK
    treats that class apart (the history lives on OpenAI's servers), which a
    wrapper would change.
    """
    if isinstance(session, GuardedSession):
        return session
    from agents.memory import OpenAIConversationsSession

    if isinstance(session, OpenAIConversationsSession):
        raise ConfigError(
            "an OpenAIConversationsSession cannot be wrapped without changing how the SDK stores it; "
            "pass it to Runner.run as it is (the guard then keeps one record per run)"
        )
    return GuardedSession(session)


@dataclasses.dataclass
class _Turn:
    """One model call: what the model was shown and what it answered; converted on first need."""

    system: str | None
    input: list[Any]
    output: list[Any]
    session: str
    trajectory: Trajectory | None = None
    problem: str | None = None


@dataclasses.dataclass
class _Run:
    """A run the hooks follow: its model call in progress, the calls of its last turn, and its guard session."""

    context: Any
    pending: tuple[str | None, list[Any]] | None
    keys: list[int]
    session: str


class AgentsSDKGuard:
    """One :class:`Guard` for the agents it guards; keeps the model turns their guardrails read."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        # per run (by its context wrapper): the model call in progress, and the calls of its last turn
        self._runs: OrderedDict[int, _Run] = OrderedDict()
        self._calls: dict[int, tuple[Any, _Turn]] = {}
        self._allowed: OrderedDict[int, tuple[Any, str]] = OrderedDict()  # allowed call -> (call object, session)
        self._lock = threading.Lock()
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(self._check, name=GUARDRAIL_NAME)
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(self._settle, name=GUARDRAIL_NAME)

    @property
    def remembered_calls(self) -> int:
        """How many tool calls of model turns are kept for their guardrails (the runs' last turns only)."""
        with self._lock:
            return len(self._calls)

    def read_only(self, tool_name: str) -> bool:
        """Whether the checklist declares ``tool_name`` read-only (such a tool runs unguarded)."""
        return plain_name(tool_name) and not self.guard.checklist.is_mutating(tool_name)

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
        host = f"agent {agent.name!r}" + (" and the agents it hands off to" if len(originals) > 1 else "")
        cross_check(self.guard.checklist, [tool.name for a in originals.values() for tool in a.tools], host)
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
        """The tool with the guard's input guardrail last (right before the tool) and its output guardrail first
        (it reads the tool's own output, before another guardrail may replace it)."""
        inputs = [g for g in tool.tool_input_guardrails or [] if g is not self.guardrail]
        outputs = [g for g in tool.tool_output_guardrails or [] if g is not self.output_guardrail]
        return dataclasses.replace(
            tool,
            tool_input_guardrails=[*inputs, self.guardrail],
            tool_output_guardrails=[self.output_guardrail, *outputs],
        )

    # -- the hooks' side ----------------------------------------------------

    def _started(self, context: Any, system: str | None, items: list[Any]) -> None:
        session = _run_keys.key(context)
        with self._lock:
            previous = self._runs.pop(id(context), None)
            if previous is not None:  # the calls of the run's previous turn have all run by now
                self._forget(previous.keys)
            self._runs[id(context)] = _Run(context, (system, list(items)), [], session)
            while len(self._runs) > _RUNS_KEPT:
                self._forget(self._runs.popitem(last=False)[1].keys)
            stale = [key for key, (_, owner) in self._allowed.items() if owner == session]
            unsettled = [self._allowed.pop(key) for key in stale]
        for raw, owner in unsettled:  # no output came (a later one still fills it in): it counts as done
            self._tell(owner, str(_field(raw, "call_id")), None)

    def _ended(self, context: Any, output: list[Any]) -> None:
        with self._lock:
            run = self._runs.get(id(context))
            if run is None or run.pending is None:
                return  # a response without its start: its calls stay unseen and are blocked
            (system, items), keys = run.pending, run.keys
            turn = _Turn(system=system, input=items, output=list(output), session=run.session)
            for item in turn.output:
                if _kind(item) == "function_call":
                    self._calls[id(item)] = (item, turn)
                    keys.append(id(item))
            run.pending = None

    def _forget(self, keys: list[int]) -> None:
        for key in keys:
            self._calls.pop(key, None)

    def _tell(self, session: str, call_id: str, output: tuple[str, bool] | None, why: str = NO_OUTPUT) -> None:
        """Tell the guard an allowed call's fate: its output ``(text, is_error)``, or unknown (``why``).

        A store that cannot take it makes the session's next write wait and count the call as unknown; it never
        fails the run."""
        try:
            if output is None:
                self.guard.record_unknown(session, call_id, why)
            else:
                self.guard.record_result(session, call_id, output[0], is_error=output[1])
        except Exception:
            pass

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
        trajectory = _converted(turn, context.turn_input)
        if trajectory is None:
            message = (
                f"The conversation could not be read ({turn.problem}), so no fact in it can be trusted and this call "
                "was not performed."
            )
            return self._refuse(call, message, turn.problem or "unreadable conversation")
        fetch = _reads(self, data.agent, context)
        decision = await self.guard.acheck(call, trajectory, session=turn.session, fetch=fetch)
        if decision.outcome == "allow":
            with self._lock:
                self._allowed[id(raw)] = (raw, turn.session)
                while len(self._allowed) > _ALLOWED_KEPT:
                    self._allowed.popitem(last=False)
        return self._outcome(call, decision)

    async def _settle(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """The output guardrail: the tool ran; its output is the allowed call's result in the guard's record."""
        raw = data.context.tool_call
        with self._lock:
            found = self._allowed.get(id(raw))
            if found is not None and found[0] is raw:
                del self._allowed[id(raw)]
            else:
                found = None
        if found is not None:
            output = _output_text(raw, data.output)
            self._tell(found[1], str(_field(raw, "call_id")), output, "the tool ran; its output could not be read")
        return ToolGuardrailFunctionOutput.allow()

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


def _reads(owner: AgentsSDKGuard, agent: Any, context: Any) -> LoopFetcher | None:
    """The agent's read-only function tools, for the guard's own reads; None when it has none.

    Each read runs the tool as the SDK would (``on_invoke_tool``) with a context of its own: the run's
    context object, a call id of the guard's (:data:`~policyguard.gate.facts.FETCH_ID_PREFIX`). Its
    result goes to the guard's record and trace, never into the run's items.
    """
    tools = {t.name: t for t in getattr(agent, "tools", ()) if isinstance(t, FunctionTool) and owner.read_only(t.name)}

    async def read(name: str, arguments: dict[str, Any]) -> Answer:
        text = json.dumps(arguments)
        tool_context = ToolContext(
            context.context, usage=context.usage, tool_name=name, tool_call_id=f"{FETCH_ID_PREFIX}{name}",
            tool_arguments=text, agent=agent,
        )  # fmt: skip
        return as_answer(await tools[name].on_invoke_tool(tool_context, text))

    return LoopFetcher.here(read, tools)


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


def _output_text(raw: Any, output: Any) -> tuple[str, bool] | None:
    """The tool output as the model will read it (its text, and whether it reports a failure), or None."""
    try:
        item = ItemHelpers.tool_call_output_item(raw, output)
        answer = to_trajectory([plain(raw), plain(item)], "openai_responses").messages[-1]
    except Exception:
        return None
    return answer.content or "", answer.is_error


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
