"""PolicyGuard as LangChain agent middleware (``langchain.agents.create_agent``).

Install the extra first (from a checkout): ``pip install -c constraints.txt -e '.[langchain]'``. ::

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
  :mod:`policyguard.trajectory.formats.langchain`: the verifier sees the whole conversation
  up to the ``AIMessage`` that made the call.
- Allowed: the tool runs with exactly the arguments that were checked.
- Blocked: the tool never runs; the call is answered with
  ``ToolMessage(content=<remediation>, status="error")``, which the model reads
  on its next turn. So are a call whose arguments cannot be read and a state
  whose messages cannot be read faithfully (a reused call id, say): fail closed.
- Tool names: at the model's first call (``wrap_model_call``) the agent's tools are compared with the
  checklist's (:func:`~policyguard.integrations.hosttools.cross_check`): a tool the checklist names and
  the agent lacks is a :class:`~policyguard.errors.ConfigError` before the model runs; agent tools no
  entry covers are judged as unknown, and a warning lists them.
- The guard's own reads: the agent's read-only tools (from the model's first call) are handed to the
  guard as ``fetch=``: a write blocked only for a read the dialogue lacks is judged on the
  read the guard makes itself (``tool.invoke``; ``tool.ainvoke`` on the agent's loop in the async hook).
  The read goes to the guard's record and trace, never into the agent's messages.
- Halt: :class:`GuardHalted` is raised. LangChain's tool node re-raises it (its
  default error handling only turns tool-invocation errors into messages), so
  ``agent.invoke`` / ``ainvoke`` ends with it; the caller catches it, and
  ``exc.decision`` says why.

**The conversation is the guard's own record.** Each mutating call is checked
with ``session=``: the guard keeps an append-only record of the conversation
(:mod:`policyguard.session`) and judges the call on it merged with the state's
messages, so a write the state no longer shows (``SummarizationMiddleware``
replaced it with a summary, another middleware trimmed it) still counts. The
session is keyed by

- the **thread id** (``config["configurable"]["thread_id"]``, what a
  checkpointer keys the conversation by): one record per thread, across
  invocations;
- without one, **the invocation**: a fresh id the middleware puts in the agent
  state at ``before_agent``, private and not checkpointed (callers cannot set
  it). Invocations without a thread id never share a record, even through one
  middleware instance.

**The messages passed in are seeded first** (:mod:`.langchain_seed`): at
``before_agent``, which LangChain runs once per invocation before any
``before_model`` hook (``SummarizationMiddleware`` rewrites messages there),
the state's messages go into the session's record. So a write present in the
messages passed to ``invoke`` always counts, with or without a thread id, and
a conversation continued by passing its messages to a new ``invoke`` keeps
every write they show. Where that cannot be promised, the run is refused:

- another ``before_agent`` hook ran before this one (it is listed ahead in
  ``middleware=[...]`` and could rewrite the messages first): ``before_agent``
  raises a one-line :class:`~policyguard.errors.ConfigError` before the model
  is called. The hooks are counted with LangGraph's ``RemainingSteps``, so the
  check cannot tell a harmless hook from one that rewrites: any is refused;
- a write in a run without a thread id whose ``before_agent`` did not run (a
  hook ahead of it jumped past it, or the middleware is used outside
  ``create_agent``): the write raises the same kind of error;
- the record cannot take the messages passed in (they pair ambiguously, or the
  session store fails): every write of the invocation is answered with an
  error ``ToolMessage``, even once a summary has removed the cause.

Each allowed call's fate goes into the record: the handler's ``ToolMessage``
(``status="error"`` or text starting with ``"Error:"`` marks a failure), or
*unknown* when the handler raised or was cancelled (the error is re-raised).
Writes of one session are judged one at a time: LangChain's tool node runs the
calls of one ``AIMessage`` concurrently, and the second write is judged once
the first has run, with its result in the record.

A tool that calls ``interrupt()`` is recorded as *unknown* while it waits; when
the run is resumed the same call (same id and arguments) runs again without a
second check, in the same process.

Order: list this middleware **after** every middleware that wraps tool calls
(the one listed first wraps the others, so none can change a call after it was
checked) and **before** every middleware with a ``before_agent`` hook (refused
otherwise, above). A middleware with both hooks cannot satisfy both: its
``before_agent`` must come after the guard's, so its tool-call wrapper runs
inside the guard's and is trusted not to change a checked call.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Annotated, Any

from typing_extensions import NotRequired

from policyguard.distribution import install_hint

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ToolCallRequest
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.messages import ToolCall as LangChainToolCall
    from langchain_core.messages import ToolMessage
    from langgraph.channels.untracked_value import UntrackedValue
    from langgraph.config import get_config
    from langgraph.errors import GraphInterrupt
    from langgraph.managed.is_last_step import RemainingStepsManager
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"policyguard.integrations.langchain needs LangChain >= 1: {install_hint('langchain')}") from exc

from policyguard.decision import Decision
from policyguard.errors import FormatError
from policyguard.guard import Guard, remediation_message
from policyguard.guard.fetching import Answer, ToolTable
from policyguard.trajectory.formats.langchain import read as read_langchain
from policyguard.trajectory.formats.langchain import read_message, tool_call_from_langchain
from policyguard.trajectory.messages import ToolCall, Trajectory

from .hostfetch import LoopFetcher, as_answer, read_names
from .hosttools import cross_check
from .langchain_seed import UNSEEDED_KEY, hooks_before, order_error, seed, skipped_error

__all__ = ["GuardHalted", "PolicyGuardMiddleware"]

INVOCATION_KEY = "policyguard_session"
_INTERRUPTS_KEPT = 1024


class _GuardState(AgentState):  # type: ignore[type-arg]
    """The agent state with the middleware's private keys: set by it (or LangGraph), never by a caller, never saved.

    ``policyguard_session``: the invocation's session id; ``policyguard_unseeded``: why the record could not
    take the messages passed in; ``policyguard_remaining_steps``: LangGraph's count (the manager comes last).
    """

    policyguard_session: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]
    policyguard_unseeded: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]
    policyguard_remaining_steps: NotRequired[Annotated[int, PrivateStateAttr, RemainingStepsManager]]


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

    state_schema = _GuardState

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard
        self.tools = []
        self._interrupted: OrderedDict[tuple[str, str], str] = OrderedDict()  # (session, call id) -> args hash
        self._lock = threading.Lock()
        self._met: frozenset[str] | None = None  # the agent's tool names, once checked against the checklist
        self._reads: dict[str, Any] = {}  # the agent's read-only tools, by name: the guard's own reads

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Seed the conversation's record with the messages passed in, before any other hook can rewrite them.

        The invocation gets its own session id (used when the run has no
        thread id). Raises :class:`~policyguard.errors.ConfigError` when another
        ``before_agent`` hook ran first.
        """
        update, session = self._begin(state, runtime)
        return _seeded(update, seed(self.guard, session, state))

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async :meth:`before_agent`: the record (maybe a database) is written in a worker thread."""
        update, session = self._begin(state, runtime)
        return _seeded(update, await asyncio.to_thread(seed, self.guard, session, state))

    def _begin(self, state: Any, runtime: Any) -> tuple[dict[str, Any], str]:
        """The invocation id to put in the state (if it has none) and the session to seed."""
        try:
            config: Mapping[str, Any] | None = get_config()
        except RuntimeError:  # called outside a LangGraph run: nothing says what ran before
            config = None
        before = hooks_before(state, config)
        if before:
            raise order_error(before)
        invocation = _state_value(state, INVOCATION_KEY)
        update: dict[str, Any] = {}
        if not (isinstance(invocation, str) and invocation):
            invocation = update[INVOCATION_KEY] = uuid.uuid4().hex
        return update, _thread_id(runtime, config) or invocation

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        """Check the agent's tools against the checklist (:meth:`meet`), then call the model unchanged."""
        self.meet(request.tools)
        return handler(request)

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        """Async :meth:`wrap_model_call`."""
        self.meet(request.tools)
        return await handler(request)

    def meet(self, tools: Iterable[Any]) -> None:
        """Compare the agent's tools with the checklist's, once per tool set (the model's first call).

        Raises :class:`~policyguard.errors.ConfigError` when the checklist names a tool the agent lacks;
        logs a warning listing the agent's tools no checklist entry covers (they are judged as unknown).
        Provider-side tools (given as dicts) never reach the tool node and are left out.
        """
        named = {name: tool for tool in tools if isinstance(name := getattr(tool, "name", None), str)}
        names = frozenset(named)
        if names == self._met:
            return
        cross_check(self.guard.checklist, names, "the LangChain agent")
        self._reads = {name: named[name] for name in read_names(self.guard.checklist, names)}
        self._met = names

    def _fetch(self) -> ToolTable | None:
        """The agent's read-only tools, called synchronously (``tool.invoke``), for the guard's own reads."""
        if not self._reads:
            return None
        return ToolTable({name: functools.partial(_invoke, tool) for name, tool in self._reads.items()})

    def _afetch(self) -> LoopFetcher | None:
        """The agent's read-only tools, awaited on this loop (``tool.ainvoke``), for the guard's own reads."""
        reads = dict(self._reads)

        async def read(name: str, arguments: dict[str, Any]) -> Answer:
            return as_answer(await reads[name].ainvoke(arguments))

        return LoopFetcher.here(read, reads)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Any],
    ) -> Any:
        """Check the call on the session's record and the state's messages; run it, answer it with the
        remediation, or halt."""
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        call, trajectory, session = prepared
        if self._resuming(session, call):
            return self._run(request, call, session, handler)
        try:
            decision = self.guard.check(call, trajectory, session=session, fetch=self._fetch())
        except Exception as exc:  # a guard that cannot decide never lets the call through
            decision = _crash(call, exc)
        checked = self._act(request, call, decision)
        if not isinstance(checked, ToolCallRequest):
            return checked
        return self._run(checked, call, session, handler)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        """Async :meth:`wrap_tool_call`: the verifier is awaited (``Guard.acheck``)."""
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        call, trajectory, session = prepared
        if self._resuming(session, call):
            return await self._arun(request, call, session, handler)
        try:
            decision = await self.guard.acheck(call, trajectory, session=session, fetch=self._afetch())
        except Exception as exc:
            decision = _crash(call, exc)
        checked = self._act(request, call, decision)
        if not isinstance(checked, ToolCallRequest):
            return checked
        return await self._arun(checked, call, session, handler)

    def _prepare(self, request: ToolCallRequest) -> tuple[ToolCall, Trajectory, str | None] | ToolMessage:
        """The call, the dialogue and the session to judge it on, or the error answer when one cannot be read.

        A read-only call gets an empty dialogue and no session: no stage reads them, so nothing is converted.
        """
        call, refusal = _read_call(request)
        if call is None:
            return _error_message(request, refusal)
        if not self.guard.checklist.is_mutating(call.name):
            return call, Trajectory(), None
        trajectory, refusal = _read_state(request)
        if trajectory is None:
            return _error_message(request, refusal)
        unseeded = _state_value(request.state, UNSEEDED_KEY)
        if unseeded:
            return _error_message(request, _unchecked(f"the guard's record of it could not be started: {unseeded}"))
        session = _session_id(request)
        if session is None:  # no thread id, and this middleware's before_agent did not run: nothing was seeded
            raise skipped_error()
        return call, trajectory, session

    def _act(self, request: ToolCallRequest, call: ToolCall, decision: Decision) -> Any:
        """The block's ToolMessage, a halt, or (allow) the request to run with exactly the checked call."""
        if decision.outcome == "halt":
            raise GuardHalted(decision)
        if decision.outcome != "allow":
            return _error_message(request, remediation_message(call, decision).content or "")
        self.guard.record_execution(decision, executed=True)
        return request.override(tool_call=_as_langchain_call(call))

    def _run(
        self, request: ToolCallRequest, call: ToolCall, session: str | None, handler: Callable[[ToolCallRequest], Any]
    ) -> Any:
        """The handler's result; its fate (result, or unknown when it raised) goes into the session's record."""
        if session is None:
            return handler(request)
        try:
            result = handler(request)
        except BaseException as exc:
            self._unknown(session, call, exc)
            raise
        self._settle(session, call, result)
        return result

    async def _arun(
        self,
        request: ToolCallRequest,
        call: ToolCall,
        session: str | None,
        handler: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        if session is None:
            return await handler(request)
        try:
            result = await handler(request)
        except BaseException as exc:  # cancellation included: the tool may or may not have run
            self._unknown(session, call, exc)
            raise
        self._settle(session, call, result)
        return result

    def _settle(self, session: str, call: ToolCall, result: Any) -> None:
        """Record the tool's answer to ``call``; a result without one is an unknown fate."""
        answer = _answer(result, call.id)
        try:
            message = read_message(answer, 0)[0] if answer is not None else None
        except FormatError:
            message = None
        try:
            if message is None:
                self.guard.record_unknown(session, call.id, "the tool returned no readable ToolMessage for this call")
            else:
                self.guard.record_result(session, call.id, message.content or "", is_error=message.is_error)
        except Exception:  # a store that cannot take it: the next write waits session_wait_s and counts it unknown
            pass

    def _unknown(self, session: str, call: ToolCall, exc: BaseException) -> None:
        """Record that ``call`` did not return; an interrupted call is remembered so its resume can run."""
        interrupted = isinstance(exc, GraphInterrupt)
        if interrupted:
            with self._lock:
                self._interrupted[(session, call.id)] = call.args_sha256_or_none() or ""
                while len(self._interrupted) > _INTERRUPTS_KEPT:
                    self._interrupted.popitem(last=False)
        why = "interrupted, waiting to be resumed" if interrupted else type(exc).__name__
        try:
            self.guard.record_unknown(session, call.id, f"the tool did not return ({why})")
        except Exception:  # as in _settle: the next write then waits session_wait_s and counts it unknown
            pass

    def _resuming(self, session: str | None, call: ToolCall) -> bool:
        """Whether ``call`` is an allowed call this middleware saw interrupted, now run again on resume."""
        if session is None:
            return False
        with self._lock:
            found = self._interrupted.pop((session, call.id), None)
        return found is not None and found == (call.args_sha256_or_none() or "")


def _session_id(request: ToolCallRequest) -> str | None:
    """The guard session of the request's conversation: its thread id, else its invocation's id, else None."""
    runtime = request.runtime
    thread = _thread_id(runtime, getattr(runtime, "config", None))
    if thread is not None:
        return thread
    invocation = _state_value(request.state, INVOCATION_KEY)
    return invocation if isinstance(invocation, str) and invocation else None


def _thread_id(runtime: Any, config: Any) -> str | None:
    """The run's thread id (what a checkpointer keys the conversation by), or None."""
    thread = getattr(getattr(runtime, "execution_info", None), "thread_id", None)
    if thread is None:
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    return str(thread) if thread is not None and str(thread) else None


def _seeded(update: dict[str, Any], problem: str | None) -> dict[str, Any] | None:
    """The state update of ``before_agent``: the invocation id it made, and why seeding failed (if it did)."""
    if problem is not None:
        update[UNSEEDED_KEY] = problem
    return update or None


def _state_value(state: Any, key: str) -> Any:
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def _answer(result: Any, call_id: str) -> ToolMessage | None:
    """The ToolMessage answering ``call_id`` in what the tool node's handler returned."""
    if isinstance(result, ToolMessage):
        return result if result.tool_call_id == call_id else None
    if isinstance(result, Command):
        update = result.update
        messages = update.get("messages") if isinstance(update, Mapping) else None
        return _answer(messages, call_id) if isinstance(messages, list) else None
    if isinstance(result, list):
        for item in result:
            found = _answer(item, call_id)
            if found is not None:
                return found
    return None


def _invoke(tool: Any, **arguments: Any) -> Any:
    """One synchronous call of a LangChain tool with these arguments (its content, as the model would read it)."""
    return tool.invoke(arguments)


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
        return None, _unchecked(str(exc))


def _unchecked(why: str) -> str:
    return (
        f"Error: the call was not run because the conversation could not be checked ({why}). "
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
