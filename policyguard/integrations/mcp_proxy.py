"""An MCP server that fronts one upstream MCP server and guards its tool calls.

Point an MCP host (Claude Desktop, an IDE, any ``mcp.ClientSession``) at the
proxy instead of the server. Tools, prompts, resources and completions are
passed through unchanged. Each client session (the stdio client, or one
streamable-HTTP MCP session, held by its connection and never by a header) has
a guard session of its own (:meth:`Guard.session`, the guard's append-only
record), and every ``tools/call`` lands in it with its fate:

* a read-only tool (checklist ``mutating: false``, or the upstream's
  ``readOnlyHint`` when the checklist does not name the tool) goes straight to
  the upstream; the call and its answer enter the record;
* a tool the upstream does not offer is refused; before serving, :meth:`GuardedUpstream.meet` reads
  the upstream's ``tools/list``: a tool the checklist names and the upstream lacks is a
  :class:`~policyguard.errors.ConfigError`, and a warning lists upstream tools no entry covers;
* any other call is judged by :meth:`Guard.acheck` on the session's record. A
  block answers with ``CallToolResult(isError=True)`` carrying the remediation,
  and the upstream never sees the call. The upstream's tools the checklist declares ``mutating: false``
  are the guard's own read tools: a write blocked only for a read the session lacks is
  judged on the read the guard sends the upstream itself; that read goes to the guard's record and
  trace, never to the client.

An allowed call's fate is the upstream's answer: a result, maybe an error
result (or an error saying it refused the arguments). With no answer (the
client cancelled after the proxy sent the call, the upstream took longer than
``upstream_timeout_s``, the connection broke, the answer could not be read) the
fate is *unknown*: the upstream may have acted, so the call counts as done for
every rule that limits repetition, and a later block tells the agent to read
the state before retrying. Only a call provably never sent (cancelled while the
guard judged it, the upstream already gone) counts as failed.

An MCP server does not see the chat, so a tool whose checklist entry has
``procedural`` requirements (what the user said, e.g. an explicit confirmation)
asks the user with MCP elicitation when the client supports it: the question
and an accepted answer are recorded in the session (an assistant message saying
the action, then the user's yes), so the verifier can cite them; a decline, a
cancel, an unanswered or failed elicitation blocks. A client without
elicitation cannot be asked, and the call is blocked unless the operator
declared that the host itself asks the user before every tool call
(``host_confirms``).

This module is the guarding; :mod:`policyguard.integrations.mcp_transport`
connects the upstream and serves it over stdio or streamable HTTP. Requires the
``mcp`` extra (from a checkout: ``pip install -c constraints.txt -e '.[mcp]'``); importing ``policyguard``
never loads it.
"""

from __future__ import annotations

import json
import re
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field

from policyguard.checklist.schema import is_glob
from policyguard.decision import Decision, RequirementResult
from policyguard.guard import Guard, off_loop, remediation_message
from policyguard.guard.fetching import Answer
from policyguard.session import Session
from policyguard.stages import Gate
from policyguard.trajectory.messages import Message, ToolCall, Trajectory
from policyguard.trajectory.toolnames import fold, unknown_tool_message
from policyguard.verifier.dialogue import safe_json

from .hostfetch import LoopFetcher
from .hosttools import cross_check

CONFIRM_FIELD = "confirm"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_STATE_KEY = "policyguard.mcp_proxy"  # our entry in the SDK's per-connection scratch dict


class ProxySettings(BaseModel):
    """What the operator chose for a proxy; every default fails closed."""

    model_config = ConfigDict(extra="forbid")

    host_confirms: bool = Field(
        default=False,
        description="The MCP host asks the user before every tool call; a client without elicitation then counts "
        "as having asked (recorded as such in the trajectory). Off: such a client's calls that need the user block.",
    )
    elicitation_timeout_s: float = Field(default=300.0, gt=0, description="How long the user has to answer.")
    upstream_timeout_s: float = Field(default=300.0, gt=0, description="How long one upstream request may take.")
    max_session_calls: int = Field(
        default=5000,
        gt=0,
        description="Calls one session may make; past it, every call is refused (the history is never cut, since "
        "a forgotten earlier call could let a repeated effect through).",
    )
    allow_unverified: bool = Field(
        default=False,
        description="With no verifier, requirements without a deterministic check do not block (they are listed "
        "UNVERIFIED). Off: a call that has one blocks.",
    )


@dataclass
class SessionState:
    """One client session: the guard's record of it, its trajectory, the next call number, and a lock that
    orders its calls (so its writes run one at a time, in the order the record holds them)."""

    session: Session
    trajectory: Trajectory = field(default_factory=Trajectory)
    calls: int = 0
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    client: ServerSession | None = None

    def next_call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        self.calls += 1
        return ToolCall(id=f"mcp-{self.calls}", name=name, arguments=arguments)

    def ask(self, call: ToolCall) -> None:
        """The call, as the assistant message that makes it (appended before it is judged or sent)."""
        self.trajectory.append(Message(role="assistant", tool_calls=[call]))

    def answer(self, call: ToolCall, content: str, *, is_error: bool) -> None:
        """What the call came back with: the upstream's answer, or the proxy's refusal."""
        self.trajectory.append(
            Message(role="tool", tool_call_id=call.id, name=call.name, content=content, is_error=is_error)
        )


class GuardedUpstream:
    """The proxy's logic over a connected upstream :class:`ClientSession`, independent of the client transport."""

    def __init__(
        self,
        guard: Guard,
        upstream: ClientSession,
        settings: ProxySettings | None = None,
        *,
        upstream_gone: anyio.Event | None = None,
    ) -> None:
        self.guard = guard
        self.upstream = upstream
        self.settings = settings or ProxySettings()
        self.upstream_gone = upstream_gone  # set when the upstream went away: a call is then not even sent
        self.tools: dict[str, types.Tool] = {}
        self._stdio: SessionState | None = None
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()  # HTTP clients, for upstream notifications

    # -- tools ----------------------------------------------------------------

    async def refresh_tools(self) -> None:
        """Read the upstream's whole tool list (all pages) into the cache the guard decisions use."""
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(1000):  # bounded: a server that pages forever is cut off
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.upstream.list_tools(params=params)
            tools.update({tool.name: tool for tool in page.tools})
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools

    async def meet(self) -> list[str]:
        """Read the upstream's tools and compare them with the checklist's, before any client is served.

        Raises :class:`~policyguard.errors.ConfigError` when the checklist names a tool the upstream does not
        offer (its remediations would send the agent to it); returns, and logs in a warning, the upstream
        tools no checklist entry covers (judged as unknown unless the upstream marks them ``readOnlyHint``).
        """
        await self.refresh_tools()
        return cross_check(self.guard.checklist, self.tools, "the upstream MCP server")

    async def list_tools(self, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        """The upstream's answer, unchanged (names, schemas, annotations); its tools refresh the cache."""
        result = await self.upstream.list_tools(params=params)
        if params is None or not params.cursor:
            self.tools = {}
        self.tools.update({tool.name: tool for tool in result.tools})
        return result

    def is_read_only(self, name: str) -> bool:
        """Checklist ``mutating: false``; or, when the checklist does not name the tool, the upstream's readOnlyHint.

        The hint counts only for a plain name (ASCII letters, digits, ``_``, ``-``, ``.``) that is no near miss
        of a checklist key: a name the checklist misses because of a zero-width space, a lookalike letter or
        its case is guarded, never read-only by the hint.
        """
        spec = self.guard.checklist.tool_spec(name)
        if spec is not None:
            return not spec.mutating
        tool = self.tools.get(name)
        hinted = tool is not None and tool.annotations is not None and tool.annotations.read_only_hint is True
        if not hinted or _PLAIN_NAME.fullmatch(name) is None:
            return False
        folded = fold(name)  # a near miss of a checklist key (Issue_refund) is that key in disguise
        return not any(fold(key) == folded for key in self.guard.checklist.tools if not is_glob(key))

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        """Answer one ``tools/call``: pass a read through, guard anything else, record every call's fate."""
        state = self.session(ctx)
        arguments = dict(params.arguments or {})
        if params.name not in self.tools:
            await self.refresh_tools()  # the upstream may have added it since the last listing
        async with state.lock:
            call = state.next_call(params.name, arguments)
            refusal = self._refusal(call, state.calls)
            if refusal is not None:
                return self._refused(state, call, refusal)
            if self.is_read_only(params.name):
                state.ask(call)
                return await self._forward(ctx, state, call, params)
            refusal = self._unjudgeable(call)
            if refusal is None:
                refusal = await self._confirm(ctx, state, call)
            if refusal is not None:
                return self._refused(state, call, refusal)
            state.ask(call)
            with anyio.CancelScope(shield=True):  # a decision in the record is always followed by the call's fate
                decision = await self.guard.acheck(call, state.trajectory, session=state.session, fetch=self._fetch())
            if not decision.allowed:
                return self._blocked(state, call, remediation_message(call, decision).content or "")
            return await self._forward(ctx, state, call, params, decision)

    def _fetch(self) -> LoopFetcher | None:
        """The upstream's tools the checklist declares ``mutating: false``, for the guard's own reads.

        Only the checklist's word counts here (an upstream ``readOnlyHint`` lets a client call pass, never the
        guard call a tool on its own). A read goes to the guard's record and trace, not to the client's session
        trajectory, and is bounded by ``upstream_timeout_s`` as well as the guard's ``fetch_timeout_s``.
        """
        names = [name for name in self.tools if not self.guard.checklist.is_mutating(name)]

        async def read(name: str, arguments: dict[str, Any]) -> Answer:
            timeout = self.settings.upstream_timeout_s
            result = await self.upstream.call_tool(name, arguments, read_timeout_seconds=timeout)
            if not isinstance(result, types.CallToolResult):
                raise TypeError("the upstream MCP server answered with an unsupported result")
            return Answer(result_text(result), bool(result.is_error))

        return LoopFetcher.here(read, names)

    def _refusal(self, call: ToolCall, calls: int) -> str | None:
        """Why the proxy refuses ``call`` before anything else looks at it (no such tool, too many calls), or None."""
        if call.name not in self.tools:
            decision = self.guard.refuse(
                call,
                "unknown_tool",
                unknown_tool_message(call.name, sorted(self.tools)),
                error="the upstream MCP server does not offer this tool",
            )
            return decision.message or ""
        if calls > self.settings.max_session_calls:
            decision = self.guard.refuse(
                call,
                "guard",
                "This session has made too many calls for the guard to keep judging them, so this call was "
                "not performed. Start a new session.",
                error=f"session over {self.settings.max_session_calls} calls",
            )
            return decision.message or ""
        return None

    async def _forward(
        self,
        ctx: ServerRequestContext[Any, Any],
        state: SessionState,
        call: ToolCall,
        params: types.CallToolRequestParams,
        decision: Decision | None = None,
    ) -> types.CallToolResult:
        """Run the call upstream (``decision``: the guard's allow) and record its fate; an upstream error is
        recorded and raised to the client.

        Only an answer is a known fate. A cancel, a timeout, a lost connection or an answer that cannot be read
        leaves the call *unknown*: the upstream may have performed it.
        """

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        if self.upstream_gone is not None and self.upstream_gone.is_set():
            if decision is not None:
                self.guard.record_execution(decision, executed=False, error="the upstream MCP server is gone")
            self._settle(state, call, "Error: the upstream MCP server is gone; the call was not sent.", is_error=True)
            raise MCPError(code=types.CONNECTION_CLOSED, message="upstream MCP server: connection closed")
        sent = False
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled before it was sent: provably not performed
            sent = True
            if decision is not None:
                self.guard.record_execution(decision, executed=True)
            result = await self.upstream.call_tool(
                call.name,
                call.arguments,
                read_timeout_seconds=self.settings.upstream_timeout_s,
                progress_callback=progress,
                meta=params.meta,
            )
        except anyio.get_cancelled_exc_class():
            if sent:
                self._settle(state, call, None, why="the client cancelled the request after the proxy sent it")
            else:
                self._settle(state, call, "Error: the client cancelled the request before it was sent.", is_error=True)
            raise
        except MCPError as exc:
            said = f"Error from the upstream MCP server: {exc.error.message}"
            if exc.error.code == types.INVALID_PARAMS:  # the upstream refused the arguments: nothing ran
                self._settle(state, call, said, is_error=True)
            else:  # a timeout, a lost connection, an HTTP error the transport turned into one: it may have run
                self._settle(state, call, None, why=f"no answer from the upstream MCP server: {exc.error.message}")
            raise
        except Exception as exc:  # a malformed upstream answer: said to the client, never an unrecorded effect
            self._settle(state, call, None, why=f"the upstream MCP server's answer could not be read: {exc}")
            raise MCPError(code=types.INTERNAL_ERROR, message=f"upstream MCP server: {exc}") from None
        if not isinstance(result, types.CallToolResult):
            self._settle(state, call, None, why="the upstream MCP server answered with an unsupported result")
            raise MCPError(code=types.INTERNAL_ERROR, message="upstream MCP server: unsupported tools/call result")
        self._settle(state, call, result_text(result), is_error=bool(result.is_error))
        return result

    def _settle(
        self, state: SessionState, call: ToolCall, content: str | None, *, is_error: bool = False, why: str = ""
    ) -> None:
        """Record what became of a sent (or unsent) call: its answer, or None when nobody knows (``why``).

        An answer goes to the record and the trajectory. An unknown fate goes to the record only: the trajectory
        leaves the call unanswered, since an error result there would tell a rule that the call failed. A read
        the guard did not judge is not in the record yet; it enters it, with its answer, from the trajectory.
        """
        try:
            if content is None:
                self.guard.record_unknown(state.session, call.id, why)
            else:
                self.guard.record_result(state.session, call.id, content, is_error=is_error)
        except Exception as exc:  # the record then blocks every later write of the session on its own
            print(f"policyguard: mcp-proxy: could not record the outcome of {call.id}: {exc}", file=sys.stderr)
        if content is not None:
            state.answer(call, content, is_error=is_error)

    def _refused(self, state: SessionState, call: ToolCall, text: str) -> types.CallToolResult:
        """A call the proxy refused by itself: a block in the record, the call and its refusal in the trajectory."""
        try:
            state.session.judge(call, "block")
        except Exception:  # a block needs no record: unrecorded, the refusal below reads as a failed call
            pass
        state.ask(call)
        return self._blocked(state, call, text)

    def _blocked(self, state: SessionState, call: ToolCall, text: str) -> types.CallToolResult:
        state.answer(call, text, is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)

    def _unjudgeable(self, call: ToolCall) -> str | None:
        """With no verifier, a call with a requirement only a verifier could judge blocks (unless opted in).

        The gate proves the requirements that carry a ``check``; the rest would be
        UNVERIFIED. The guard is built to let UNVERIFIED through when there is no
        verifier (a call whose checks all hold must pass), so this is where the
        proxy keeps the rest from passing unjudged.
        """
        if self.guard.verifier is not None or self.settings.allow_unverified:
            return None
        if self.guard.checklist.tool_spec(call.name) is None:
            return None  # a tool the checklist does not name: the guard blocks it and says why
        unjudged = [r for r in self.guard.checklist.requirements_for(call.name) if r.check is None]
        if not unjudged:
            return None
        ids = ", ".join(r.id for r in unjudged)
        message = (
            f"This action needs a judgement only a verifier model can make ({ids}), and the guard runs without one, "
            "so it was not performed. Tell the user it cannot be completed here."
        )
        results = [RequirementResult(id=r.id, status="UNVERIFIED", judged_by="none") for r in unjudged]
        self.guard.refuse(call, "guard", message, error="no verifier for these requirements", requirements=results)
        return message

    # -- the user's confirmation --------------------------------------------

    async def _confirm(self, ctx: ServerRequestContext[Any, Any], state: SessionState, call: ToolCall) -> str | None:
        """Obtain what only the user can say for ``call``; None to go on, or the remediation of a block."""
        if self.guard.checklist.tool_spec(call.name) is None:
            return None  # a tool the checklist does not name: the guard blocks it, so nobody is asked
        needed = [r for r in self.guard.checklist.requirements_for(call.name) if r.kind == "procedural"]
        if not needed or await self._gate_blocks(call, state):
            return None  # nothing to ask, or the guard blocks anyway: never ask the user for a refused action
        question = confirmation_question(call, self.tools.get(call.name))
        unverified = [RequirementResult(id=r.id, status="UNVERIFIED", judged_by="none") for r in needed]
        if not supports_elicitation(ctx.session):
            if not self.settings.host_confirms:
                message = (
                    "This action needs the user's own word (" + ", ".join(r.id for r in needed) + "), and this MCP "
                    "client cannot ask the user (it does not support elicitation), so it was not performed. "
                    "Tell the user it has to be done another way."
                )
                self.guard.refuse(call, "guard", message, error="client has no elicitation", requirements=unverified)
                return message
            state.trajectory.append(Message(role="assistant", content=question))
            state.trajectory.append(
                Message(
                    role="user",
                    content="[recorded by the MCP proxy: the operator declared that the MCP host asks the user to "
                    "approve every tool call (--host-confirms); the proxy did not see that approval itself]",
                )
            )
            return None
        answer = await self._elicit(ctx, question)
        if answer is not True:
            message = (
                f"The user did not confirm this action ({answer}), so it was not performed. "
                "Do not retry it unless the user asks for it again."
            )
            self.guard.refuse(call, "approver", message, error=f"elicitation: {answer}", requirements=unverified)
            return message
        state.trajectory.append(Message(role="assistant", content=question))
        state.trajectory.append(Message(role="user", content="Yes, I confirm this action."))
        return None

    async def _gate_blocks(self, call: ToolCall, state: SessionState) -> bool:
        """Whether the deterministic gate alone already blocks ``call`` on the session's record (then the user
        is not asked)."""
        gate = self.guard.gate
        if gate is None:
            return False
        try:
            decision = await off_loop(self._gate_on_record, gate, call, state)
        except Exception:  # the guard's own check will block it and say why
            return True
        return decision.outcome in ("block", "halt")

    def _gate_on_record(self, gate: Gate, call: ToolCall, state: SessionState) -> Decision:
        """The gate's decision on the record, with what the trajectory added since the last check merged in."""
        record = state.session
        record.sync()
        record.observe(state.trajectory, pending=call)
        view: Any = record.view(call)  # read by the gate as a trajectory, as the guard's own check passes it
        return gate.check(call, view, self.guard.context())

    async def _elicit(self, ctx: ServerRequestContext[Any, Any], question: str) -> bool | str:
        """True when the user accepted with ``confirm: true``; otherwise a few words saying what happened."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                CONFIRM_FIELD: {
                    "type": "boolean",
                    "title": "Confirm",
                    "description": "Yes: perform exactly this action.",
                }
            },
            "required": [CONFIRM_FIELD],
        }
        try:
            with anyio.fail_after(self.settings.elicitation_timeout_s):
                result = await ctx.session.elicit_form(question, schema, related_request_id=ctx.request_id)
        except TimeoutError:
            return "no answer in time"
        except Exception as exc:  # an error from the client, a closed channel: nobody confirmed
            return f"the confirmation request failed: {exc}"
        if result.action != "accept":
            return "declined" if result.action == "decline" else "cancelled"
        content = result.content or {}
        if content.get(CONFIRM_FIELD) is not True:
            return "answered without confirming"
        return True

    # -- sessions -------------------------------------------------------------

    def session(self, ctx: ServerRequestContext[Any, Any]) -> SessionState:
        """The state of the client session ``ctx`` belongs to.

        stdio serves one client per process, so the process holds its state. Over
        HTTP the state lives in the SDK's per-client connection (``Connection.state``),
        never keyed by a header: a stateful session keeps its history for its life,
        and a stateless (2026-07-28 era) request is a connection of its own, so it
        starts from an empty trajectory (writes that need earlier reads block).
        Each state holds a guard session of its own (:meth:`Guard.session`, a new
        random id), so the record follows the MCP session and nothing else.
        """
        if ctx.request is None:
            if self._stdio is None:
                self._stdio = self.new_state()
            state = self._stdio
        else:
            connection = getattr(ctx.session, "_connection", None)  # where the SDK keeps the per-client Connection
            scratch = getattr(connection, "state", None)
            if not isinstance(scratch, dict):
                state = self.new_state()  # no connection to hold history: start empty (fail closed)
                state.client = ctx.session
                return state
            held = scratch.get(_STATE_KEY)
            if not isinstance(held, SessionState):
                held = scratch[_STATE_KEY] = self.new_state()
                self._connections.add(connection)
            state = held
        state.client = ctx.session
        return state

    def new_state(self) -> SessionState:
        """A client session's state, with a new guard session (an empty record)."""
        return SessionState(session=self.guard.session())

    def clients(self) -> list[ServerSession]:
        """The client sessions still connected (the last request's session of each)."""
        states = [self._stdio] if self._stdio is not None else []
        states += [c.state.get(_STATE_KEY) for c in list(self._connections)]
        return [s.client for s in states if isinstance(s, SessionState) and s.client is not None]

    async def notify_clients(self, message: Any) -> None:
        """Pass an upstream notification on to every client session (progress travels with its own request)."""
        skipped = (types.ProgressNotification, types.CancelledNotification, types.SubscriptionsAcknowledgedNotification)
        if isinstance(message, Exception) or isinstance(message, skipped):
            return
        for client in self.clients():
            try:
                await client.send_notification(message)
            except Exception as exc:  # one gone client must not stop the others
                print(f"policyguard: mcp-proxy: could not pass a notification on: {exc}", file=sys.stderr)


def supports_elicitation(session: ServerSession) -> bool:
    """Whether the client declared form elicitation and this request can carry a server-to-client request."""
    capabilities = session.client_capabilities
    if capabilities is None or capabilities.elicitation is None or not session.can_send_request:
        return False
    elicitation = capabilities.elicitation
    return elicitation.form is not None or elicitation.url is None  # an empty object means form (2025-06)


def confirmation_question(call: ToolCall, tool: types.Tool | None) -> str:
    """What the user is asked: the tool and its exact arguments, one line, nothing that can fake structure."""
    title = tool.title if tool is not None and tool.title else None
    shown = f"{safe_json(call.name)}" + (f" ({safe_json(title)})" if title else "")
    return (
        f"The assistant wants to run the tool {shown} with these arguments: {safe_json(call.arguments)}. "
        "Do you confirm this action?"
    )


def result_text(result: types.CallToolResult) -> str:
    """The result as the guard reads it: the text the agent sees, or the structured content as JSON."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if len(texts) == 1 and len(result.content) == 1:
        return texts[0]
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    parts = [b.text if isinstance(b, types.TextContent) else f"[{b.type} content]" for b in result.content]
    return "\n".join(parts)
