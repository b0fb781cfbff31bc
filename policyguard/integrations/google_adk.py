"""Guard a Google ADK agent's tool calls with a runner plugin (``pip install -c constraints.txt -e '.[google-adk]'``).

::

    from google.adk.apps import App
    from policyguard.integrations.google_adk import guard_plugin

    app = App(name="desk", root_agent=agent, plugins=[guard_plugin(guard)])

Written against ``google-adk`` 2.13: ``BasePlugin``'s ``before_tool_callback`` /
``after_tool_callback`` / ``on_tool_error_callback`` / ``before_run_callback``, the
session's events (``tool_context.session.events``) and tool confirmation
(``tool_context.request_confirmation``, ``tool_context.tool_confirmation``).
ADK is imported on first use: importing this module loads none of it.

**Guarantee, stated plainly.** Every tool call of every agent the runner runs
(the root agent, agents it transfers to, and the agents of an ``AgentTool`` that
inherits the runner's plugins) goes through ``Guard.acheck`` before the tool
runs, read-only tools included (their result is recorded). Not covered: a tool
ADK runs without the tool pipeline (none in 2.13's ``LlmAgent``), an
``AgentTool(include_plugins=False)``, and arguments an agent's own
``before_tool_callback`` changes after the check (ADK runs agent callbacks after
plugins; such a change is noticed when the tool returns, and the call is then
recorded as *unknown*: it counts as done and is no fact). A plugin listed after
this one that also answers ``before_tool_callback`` could change arguments the
same way, so the run is refused (:class:`~policyguard.errors.ConfigError`)
before anything runs.

**Before a tool runs** the guard judges the call on the session's events (read by
:func:`trajectory`) and on its own record of the session. Then

- a pass returns None: the tool runs;
- a block returns ``{"error": <remediation>}``: the tool never runs and the model
  reads the remediation as the tool's result;
- an escalation asks ADK for a tool confirmation
  (``tool_context.request_confirmation``: hint is the decision's message, payload
  ``{"policyguard": message, "approval_id": id}``) and answers the call with
  ``{"error": message}``; the run pauses on ADK's ``adk_request_confirmation``
  call. The client's confirmation only resumes the call: the re-run is judged
  again and runs only when a reviewer approved that very call in the guard's
  approval queue (:mod:`policyguard.approvals`), which the check spends once;
  still waiting is a block, and a declined confirmation is a block without a check;
- a halt raises :class:`GuardHalted` (ADK's plugin manager wraps it in a
  ``RuntimeError``), which ends the run;
- an error anywhere in the plugin (reading the events, the guard, its store) is a
  block: never a tool run.

**After it ran** its result goes into the record (``Guard.record_result``; a dict
with a true ``"error"`` value is a failure, as ADK's own tools report one), so
facts come from what the tool returned. A tool that raised or was cancelled, a
long-running tool (its result comes later, from the client), and a call whose
arguments changed after the check are recorded as *unknown*. A call that ADK or
the tool paused for a confirmation or a credential did not run: it is recorded as
a failure, and its re-run is judged as a new call.

**The record** is keyed by the ADK session (:func:`record_key`: app name, user id
and session id, since ADK scopes session ids per user), so every invocation and
every agent of one session share one record: a call the guard judged still counts
after the session's events no longer show it (a session service that drops or
rewrites events).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policyguard.decision import Decision
from policyguard.errors import ConfigError, FormatError, PolicyGuardError
from policyguard.guard import NO_VERIFIER_MESSAGE, Guard, remediation_message
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from ._resulttext import result_text

if TYPE_CHECKING:  # pragma: no cover
    from google.adk.plugins import BasePlugin

__all__ = ["AdkToolGuard", "GuardHalted", "guard_plugin", "record_key", "trajectory"]

PLUGIN_NAME = "policyguard"
# ADK's own function calls: the pauses it asks the client to answer (not tools the model called).
FRAMEWORK_CALLS = frozenset({"adk_request_confirmation", "adk_request_credential", "adk_request_input"})
DECLINED = "The person asked to confirm this call declined it, so it was not performed. Do not retry it."
PAUSED = "the call was paused for a confirmation or a credential; the tool did not run"
LONG_RUNNING = "a long-running tool started; its result comes later"
CHANGED = "the arguments changed after the policy check (another callback rewrote them)"


class GuardHalted(PolicyGuardError):
    """The guard halted the run at a tool call; ``decision`` says why."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or "the policy guard halted the run")
        self.decision = decision


@dataclass(frozen=True)
class _Allowed:
    """An allowed call waiting for its fate: the record it belongs to and the arguments that were checked."""

    session: str
    call_id: str
    arguments: dict[str, Any]
    long_running: bool


class AdkToolGuard:
    """The plugin's work, free of ADK types: judge a call before it runs, record its fate after."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self._allowed: weakref.WeakKeyDictionary[Any, _Allowed] = weakref.WeakKeyDictionary()

    async def before_tool(self, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """None to run the tool, else the dict that answers the call instead (a block or a pause)."""
        call = ToolCall(id=str(tool_context.function_call_id or "?"), name=str(getattr(tool, "name", "?")))
        try:
            call = ToolCall(id=call.id, name=call.name, arguments=copy.deepcopy(dict(tool_args)))
            confirmation = tool_context.tool_confirmation
            if confirmation is not None and not confirmation.confirmed:
                refused = self.guard.refuse(call, "approver", DECLINED, error="the confirmation was declined")
                return _answer(call, refused)
            session = record_key(tool_context.session)
            decision = await self.guard.acheck(call, trajectory(tool_context.session.events), session=session)
        except Exception as exc:  # fail closed: the call does not run
            return {"error": f"{NO_VERIFIER_MESSAGE} ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"}
        if decision.outcome == "allow":
            self.guard.record_execution(decision, executed=True)
            long_running = bool(getattr(tool, "is_long_running", False))
            self._allowed[tool_context] = _Allowed(session, call.id, call.arguments, long_running)
            return None
        if decision.outcome == "halt":
            raise GuardHalted(decision)
        if decision.outcome == "escalate" and confirmation is None:
            try:
                payload = {"policyguard": decision.message, "approval_id": decision.approval_id}
                tool_context.request_confirmation(hint=decision.message, payload=payload)
                tool_context.actions.skip_summarization = True  # as ADK's own gate: the pause is no result
            except Exception:
                pass  # no pause: the call is still answered with the message, and never runs
        return _answer(call, decision)

    def after_tool(self, tool_args: dict[str, Any], tool_context: Any, result: Any) -> None:
        """Record what an allowed call returned (a call the guard answered itself has nothing to record)."""
        allowed = self._allowed.pop(tool_context, None)
        if allowed is None:
            return
        actions = tool_context.actions
        paused = allowed.call_id in (actions.requested_tool_confirmations or {}) or allowed.call_id in (
            actions.requested_auth_configs or {}
        )
        if paused:
            self._tell(allowed, (f"{PAUSED}: {result_text(result)}", True))
        elif allowed.long_running:
            self._tell(allowed, None, LONG_RUNNING)
        elif dict(tool_args) != allowed.arguments:
            self._tell(allowed, None, CHANGED)
        else:
            self._tell(allowed, (result_text(result), failed(result)))

    def tool_error(self, tool_context: Any, error: BaseException) -> None:
        """An allowed call raised or was cancelled: it may have run, so its fate is unknown."""
        allowed = self._allowed.pop(tool_context, None)
        if allowed is not None:
            self._tell(allowed, None, f"the tool raised {type(error).__name__} (or was cancelled)")

    def check_order(self, plugin: Any, plugins: Iterable[Any], base: type) -> None:
        """Refuse a plugin after ``plugin`` that answers ``before_tool_callback`` (``base`` does not): it could
        rewrite checked arguments, since ADK hands every plugin the same dict."""
        listed = list(plugins)
        later = listed[next((i for i, p in enumerate(listed) if p is plugin), len(listed)) + 1 :]
        hook = base.before_tool_callback  # type: ignore[attr-defined]
        rewriters = [getattr(p, "name", type(p).__name__) for p in later if type(p).before_tool_callback is not hook]
        if rewriters:
            raise ConfigError(
                f"the plugins {rewriters} come after {getattr(plugin, 'name', PLUGIN_NAME)!r} and answer "
                "before_tool_callback, so they could change a call after the policy check; list the guard's "
                "plugin last"
            )

    def _tell(self, allowed: _Allowed, output: tuple[str, bool] | None, why: str = "") -> None:
        """Record an allowed call's fate; a store that cannot take it makes the session's next write count
        the call as unknown, never the run fail."""
        try:
            if output is None:
                self.guard.record_unknown(allowed.session, allowed.call_id, why)
            else:
                self.guard.record_result(allowed.session, allowed.call_id, output[0], is_error=output[1])
        except Exception:
            pass


def _answer(call: ToolCall, decision: Decision) -> dict[str, Any]:
    """The dict that answers a call the guard did not let run: ADK's error convention, read by the model."""
    return {"error": remediation_message(call, decision).content or NO_VERIFIER_MESSAGE}


def record_key(session: Any) -> str:
    """The guard's record id for an ADK session: ``app/user/session`` (a sha256 of it past 200 characters)."""
    parts = [str(session.app_name), str(session.user_id), str(session.id)]
    if not all(parts):
        raise ConfigError("the ADK session has no app name, user id or id, so the guard has no record to judge on")
    key = "/".join(parts)
    if len(key) <= 200 and key.isprintable():
        return key
    return "adk-sha256:" + hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()


def failed(result: Any) -> bool:
    """Whether a tool's result reports a failure: a dict whose ``"error"`` is true (ADK's own convention)."""
    return isinstance(result, Mapping) and bool(result.get("error"))


def response_text(response: Any) -> str:
    """A function response as the record keeps it: ADK wraps a non-dict result as ``{"result": value}``."""
    if isinstance(response, Mapping) and set(response) == {"result"}:
        return result_text(response["result"])
    return result_text(response)


def trajectory(events: Iterable[Any]) -> Trajectory:
    """ADK session events as the guard's :class:`Trajectory`.

    A user event's text is a user message; an agent's event (any author but
    ``"user"``: the root agent and its sub-agents alike) is an assistant message
    with its text and function calls, all the calls of one event in one message
    (the same place). Function responses are tool messages; a response the
    client sent (in a user event) is a failed result, never a fact, and so is a
    dict whose ``"error"`` is true. ADK's own pauses are dropped: its
    ``adk_request_*`` calls and their answers, and the placeholder response of a
    call paused for a confirmation or a credential (the call stays issued until
    its re-run answers it). Thoughts, partial (streamed) events and events
    without content (a compaction's summary) are dropped too: dropping never
    adds a fact. A function call without an id raises
    :class:`~policyguard.errors.FormatError`.
    """
    out: list[Message] = []
    for index, event in enumerate(events):
        content = getattr(event, "content", None)
        if getattr(event, "partial", False) or content is None or not content.parts:
            continue
        actions = event.actions
        paused = set(actions.requested_tool_confirmations or {}) | set(actions.requested_auth_configs or {})
        by_user = event.author == "user"
        texts: list[str] = []
        calls: list[ToolCall] = []
        results: list[Message] = []
        for part in content.parts:
            if getattr(part, "thought", False):
                continue
            if part.text:
                texts.append(part.text)
            call, response = part.function_call, part.function_response
            if call is not None and call.name not in FRAMEWORK_CALLS:
                if by_user or not call.id or not call.name:
                    raise FormatError(f"event {index}: a function call without an id or a name, or from the user")
                calls.append(ToolCall(id=call.id, name=call.name, arguments=dict(call.args or {})))
            if response is not None and response.name not in FRAMEWORK_CALLS and response.id not in paused:
                if not response.id:
                    raise FormatError(f"event {index}: a function response without an id")
                results.append(Message(role="tool", tool_call_id=response.id, name=response.name,
                                       content=response_text(response.response),
                                       is_error=by_user or failed(response.response)))  # fmt: skip
        text = "\n".join(texts) if texts else None
        if by_user:
            out.extend(results)
            if text:
                out.append(Message(role="user", content=text))
            continue
        if text or calls:
            out.append(Message(role="assistant", content=text, tool_calls=calls))
        out.extend(results)
    return Trajectory(messages=out)


@functools.cache
def _plugin_class() -> Any:
    """The ``BasePlugin`` subclass, built on first use so that importing this module loads no ADK."""
    from policyguard.distribution import install_hint

    try:
        from google.adk.plugins import BasePlugin
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"policyguard.integrations.google_adk needs ADK: {install_hint('google-adk')}") from exc

    class PolicyGuardPlugin(BasePlugin):
        """Checks every tool call with the guard before it runs and records its result after."""

        def __init__(self, guard: Guard, name: str) -> None:
            super().__init__(name=name)
            self.guard = guard
            self.tools = AdkToolGuard(guard)

        async def before_run_callback(self, *, invocation_context: Any) -> Any:
            self.tools.check_order(self, invocation_context.plugin_manager.plugins, BasePlugin)
            return None

        async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> Any:
            return await self.tools.before_tool(tool, tool_args, tool_context)

        async def after_tool_callback(
            self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
        ) -> Any:
            self.tools.after_tool(tool_args, tool_context, result)
            return None

        async def on_tool_error_callback(
            self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: BaseException
        ) -> Any:
            self.tools.tool_error(tool_context, error)
            return None

    return PolicyGuardPlugin


def guard_plugin(guard: Guard, *, name: str = PLUGIN_NAME) -> BasePlugin:
    """An ADK plugin that guards every tool call of the runner's agents with ``guard`` (see the module
    docstring). Pass it in ``App(plugins=[...])`` or ``Runner(plugins=[...])``, last."""
    return _plugin_class()(guard, name)
