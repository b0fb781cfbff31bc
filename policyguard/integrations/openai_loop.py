"""A drop-in guard for a plain tool-calling loop.

Give it your tool functions; it runs read-only ones directly, sends mutating
ones through the guard, and returns what the loop should append: the tool's
result, or - when the guard blocks - the remediation as the tool's error result
with the same call id, so the model reads it on its next turn.

Several calls in one assistant message run one after another, so each is judged
on the dialogue *after* the calls before it: a result GuardedTools produced for
an earlier call of the same message counts even when the loop has not appended
it yet, and a call whose earlier siblings have not run is refused. A history in
which a call id is used twice or answered twice raises
:class:`~policyguard.errors.FormatError` naming both messages.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from policyguard.decision import Decision
from policyguard.guard import Guard, remediation_message
from policyguard.trajectory.messages import ToolCall, Trajectory

_REMEMBERED_OUTCOMES = 1024

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.enforcement.executor import GuardedExecutor
    from policyguard.enforcement.store import Ledger
    from policyguard.trajectory.formats.chat_history import ChatHistory


class ToolOutcome(BaseModel):
    """What happened to one call: the text for the model, and the decision behind it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

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

    With an ``executor`` (a :class:`policyguard.enforcement.executor.GuardedExecutor`, and a
    guard built with ``grants=``), allowed calls run only through the executor,
    which verifies the call-bound grant, consumes its nonce and keeps the ledger;
    ``tools`` is then unused.

    Without one, a tool with an ``effect:`` still runs at most once per idempotency key:
    ``ledger`` (default: an embedded in-memory SQLite ledger, this object's lifetime; pass
    ``SQLiteStore(path)`` to share it across processes) claims the key before the tool runs, and a
    retry with the same key gets the recorded result, never a second effect. The checklist's tool
    names are checked against ``tools`` here (:func:`~policyguard.integrations.hosttools.cross_check`).

    The tools the checklist declares ``mutating: false`` are also the guard's own read tools: when a
    write is blocked only for a read the dialogue lacks, the guard makes it itself
    (:mod:`policyguard.guard.fetching`); the result goes to the session record and the trace, never
    to the model's dialogue.
    """

    def __init__(
        self,
        guard: Guard,
        tools: dict[str, Callable[..., Any]] | None = None,
        *,
        executor: GuardedExecutor | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        if executor is not None and guard.grants is None:
            from policyguard.errors import ConfigError

            raise ConfigError("an executor needs a guard that issues grants (Guard(..., grants=GrantIssuer(...)))")
        if executor is not None and guard.denials is not getattr(executor.verifier, "nonces", None):
            from policyguard.errors import ConfigError

            raise ConfigError(
                "deny wins only when the guard records denials where the executor reads them: "
                "Guard(..., denials=store) with GrantVerifier(..., nonces=store)"
            )
        self.guard = guard
        self.tools = dict(tools or {})
        self.executor = executor
        if executor is None and tools is not None:
            from .hosttools import cross_check

            cross_check(guard.checklist, self.tools, "GuardedTools")
        from policyguard.guard.fetching import read_tools

        self.fetch = read_tools(guard.checklist, self.tools)
        """The read-only tools the guard may call itself when a write lacks a read; None: none."""
        self.effects = ledger
        if executor is None and ledger is None and any(s.effect for s in guard.checklist.tools.values()):
            from policyguard.enforcement.store import SQLiteStore

            self.effects = SQLiteStore(":memory:")
        self._outcomes: OrderedDict[tuple[int, str, str, str], ToolOutcome] = OrderedDict()
        self._history: ChatHistory | None = None  # the incremental Chat converter, made on first use
        self._lock = threading.Lock()
        self.session = guard.session()
        """This loop's record in the guard (one session per GuardedTools): every call and its fate."""

    def run(self, call: ToolCall, trajectory: Trajectory) -> ToolOutcome:
        """Check one call against the dialogue so far and run it if allowed.

        Raises :class:`~policyguard.errors.FormatError` when ``trajectory`` uses a
        call id twice or answers one twice.
        """
        from policyguard.trajectory.formats.common import check_ids

        check_ids(trajectory)
        return self._run(call, trajectory)

    def _run(self, call: ToolCall, trajectory: Trajectory, position: int | None = None) -> ToolOutcome:
        if position is None:
            position = _position(call, trajectory)
        state, refusal = self._state_after_earlier_calls(call, trajectory, position)
        if refusal is not None:
            return self._refuse(call, refusal, position)
        outcome = self._decide_and_run(call, state)
        self._remember(call, outcome, position)
        return outcome

    def _refuse(self, call: ToolCall, reason: str, position: int | None) -> ToolOutcome:
        """A call refused before the guard saw it (unreadable, or out of order); remembered like any outcome."""
        decision = Decision.block("guard", reason, call_id=call.id, tool=call.name, args_sha256=call.args_sha256)
        outcome = _outcome(call, decision, reason, is_error=True, executed=False)
        self._remember(call, outcome, position)
        return outcome

    def _decide_and_run(self, call: ToolCall, trajectory: Trajectory) -> ToolOutcome:
        decision = self.guard.check(call, trajectory, session=self.session, fetch=self.fetch)
        if decision.outcome != "allow":
            remediation = remediation_message(call, decision).content or ""
            return _outcome(call, decision, remediation, is_error=True, executed=False)
        try:
            outcome = self._execute(call, decision)
        except BaseException as exc:  # cancelled or crashed mid-call: it may or may not have run
            self.session.record_unknown(call.id, f"the tool call was interrupted: {type(exc).__name__}")
            raise
        if outcome.executed or not outcome.is_error:
            self.session.record_result(call.id, outcome.content, is_error=outcome.is_error)
        else:  # refused before it ran: it changed nothing
            self.session.record_result(call.id, outcome.content, is_error=True)
        return outcome

    def _execute(self, call: ToolCall, decision: Decision) -> ToolOutcome:
        if self.executor is not None:
            return self._through_executor(call, decision)
        function = self.tools.get(call.name)
        if function is None:
            self.guard.record_execution(decision, executed=False, error="unknown tool")
            return _outcome(call, decision, f"Error: unknown tool {call.name!r}", is_error=True, executed=False)
        effect = self._effect_key(call)
        if effect is not None:
            refused = self._claim(call, decision, effect)
            if refused is not None:
                return refused
        self.guard.record_execution(decision, executed=True)
        try:
            result = function(**call.arguments)
        except Exception as exc:  # the tool's own failure goes back to the model; the key stays pending
            return _outcome(call, decision, f"Error: {exc}", is_error=True, executed=True)
        text = _text(result)
        if effect is not None and self.effects is not None:
            self.effects.complete_effect(effect, text)
        return _outcome(call, decision, text, is_error=False, executed=True)

    def _effect_key(self, call: ToolCall) -> str | None:
        spec = self.guard.checklist.tool_spec(call.name)
        if spec is None or spec.effect is None or self.effects is None:
            return None
        return str(call.arguments.get(spec.effect.idempotency_arg))

    def _claim(self, call: ToolCall, decision: Decision, key: str) -> ToolOutcome | None:
        """Claim ``key`` in the ledger; the outcome for the agent when the key was used before, else None."""
        assert self.effects is not None
        effect = self.guard.checklist.tool_spec(call.name).effect  # type: ignore[union-attr]
        assert effect is not None
        currency = call.arguments.get(effect.currency_arg) if effect.currency_arg else None
        claim = self.effects.begin_effect(
            key,
            tool=call.name,
            transaction_id=str(call.arguments.get(effect.transaction_arg)),
            amount=float(call.arguments.get(effect.amount_arg, 0)),
            currency=None if currency is None else str(currency),
            args_sha256=call.args_sha256,
        )
        if claim.created:
            return None
        record = claim.record
        self.guard.record_execution(decision, executed=False, error="idempotency key already used")
        if record is not None and record.args_sha256 == call.args_sha256 and record.status == "committed":
            return _outcome(call, decision, record.result_json or "", is_error=False, executed=False)
        why = (
            "another call"
            if record is None or record.args_sha256 != call.args_sha256
            else "a call whose fate is unknown"
        )
        return _outcome(
            call,
            decision,
            f"Error: the idempotency key {key!r} was already used by {why}, so this call was not run again. "
            "Use a new key for a new effect.",
            is_error=True,
            executed=False,
        )

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

    def openai_chat(self, tool_call: Any, messages: Sequence[Any]) -> dict[str, Any]:
        """One OpenAI Chat Completions tool call in, the ``role: tool`` message to append out.

        ``messages`` is the conversation so far, including the assistant message
        that carries ``tool_call``. It is converted incrementally: messages
        already seen are reused while they compare equal to what was converted,
        and everything from the first changed message on is converted again.

        A call whose arguments cannot be read (invalid JSON, ``NaN``,
        ``Infinity``, integers beyond 64 bits, too deep) is not run; its answer
        is an error result naming the argument, so the model can correct it.
        Raises :class:`~policyguard.errors.FormatError` when the history cannot
        be read faithfully (a call id used twice or answered twice, ``tool_call``
        differing from the call of the same id in ``messages``, a call already
        answered).
        """
        from policyguard.errors import FormatError
        from policyguard.trajectory.formats.chat_history import ChatHistory
        from policyguard.trajectory.formats.openai_chat import tool_call_from_openai, tool_error_message

        unreadable: FormatError | None = None
        try:
            call = tool_call_from_openai(tool_call)
        except FormatError as exc:  # raises again unless only the arguments failed
            call, unreadable = tool_call_from_openai(tool_call, unreadable={}), exc
        with self._lock:
            if self._history is None:
                self._history = ChatHistory(tail_only=True)  # the session record keeps what it saw
            trajectory = self._history.convert(messages)
            position = _check_pending(call, trajectory, self._history)
        if unreadable is not None:
            reason = f"{unreadable}. The call was not run; send its arguments as one JSON object."
            outcome = self._refuse(call, reason, position)
        else:
            outcome = self._run(call, trajectory, position)
        if outcome.is_error and not outcome.executed:
            return tool_error_message(outcome.call_id, outcome.content)
        return {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.content}

    def _remember(self, call: ToolCall, outcome: ToolOutcome, position: int | None) -> None:
        """Keep ``outcome`` for the later calls of the same message (keyed by where the call sits)."""
        if position is None:
            return
        with self._lock:
            self._outcomes[(position, call.id, call.name, call.args_sha256)] = outcome
            while len(self._outcomes) > _REMEMBERED_OUTCOMES:
                self._outcomes.popitem(last=False)

    def _state_after_earlier_calls(
        self, call: ToolCall, trajectory: Trajectory, position: int | None
    ) -> tuple[Trajectory, str | None]:
        """``(trajectory, None)`` when every call before ``call`` in its assistant message has run (or was
        refused), else ``(trajectory, refusal)``. ``position`` is the index of the message carrying ``call``
        (None: not in the history).

        The trajectory is returned as the loop gave it: the results GuardedTools
        produced for the earlier calls are already in the guard's session record.
        """
        messages = trajectory.messages
        if position is None:
            return trajectory, None
        siblings = messages[position].tool_calls
        earlier = siblings[: next(i for i, c in enumerate(siblings) if c.id == call.id)]
        if not earlier:
            return trajectory, None
        answered = {m.tool_call_id for m in messages[position + 1 :] if m.role == "tool"}
        for sibling in earlier:
            if sibling.id in answered:
                continue
            with self._lock:
                outcome = self._outcomes.get((position, sibling.id, sibling.name, sibling.args_sha256))
            if outcome is None:
                return trajectory, (
                    f"Call {sibling.id!r} ({sibling.name}) comes before this call in the same message and "
                    "has not run; the calls of one message run in order, each after the one before it."
                )
        return trajectory, None


def _position(call: ToolCall, trajectory: Trajectory) -> int | None:
    """The index of the (last) message that carries ``call``, or None."""
    messages = trajectory.messages
    for index in range(len(messages) - 1, -1, -1):
        if any(c.id == call.id for c in messages[index].tool_calls):
            return index
    return None


def _check_pending(call: ToolCall, trajectory: Trajectory, history: ChatHistory) -> int | None:
    """The index of the message carrying ``call``; it must match ``call`` and not be answered yet."""
    from policyguard.errors import FormatError

    index = history.call_index(call.id)
    if index is not None:
        listed = next(c for c in trajectory.messages[index].tool_calls if c.id == call.id)
        if (listed.name, listed.arguments) != (call.name, call.arguments):
            raise FormatError(f"message {index}: call {call.id!r} differs from the tool call given to check")
    answered = history.result_index(call.id)
    if answered is not None:
        raise FormatError(f"message {answered}: call {call.id!r} is already answered; it is not run twice")
    return index


def _text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, default=str)


def _outcome(call: ToolCall, decision: Decision, content: str, *, is_error: bool, executed: bool) -> ToolOutcome:
    return ToolOutcome(
        call_id=call.id, tool=call.name, content=content, is_error=is_error, executed=executed, decision=decision
    )
