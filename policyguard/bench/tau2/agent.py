"""A tau2 agent with the guard in its tool-calling loop.

This is the orchestrator patch of the PolicyGuard paper (arXiv 2606.29225, appendix D).

tau2's evaluator re-executes the whole trajectory on a fresh environment and
raises if any tool result differs, so a blocked call must never reach the
trajectory. The seam that respects this is the agent itself: when the guard
blocks a call, :class:`GuardedAgent` keeps the attempt and the remediation (as
an error tool message) in its *own* state, asks the model again, and returns to
the orchestrator only a message whose calls were all accepted. The blocked
attempt is recorded in :attr:`GuardedAgent.events` for the metrics. A message
is judged call by call, each call on the state after the calls before it: when
a mutating call follows other calls of the same message, the message is cut
there. The orchestrator runs the first part; the held calls are judged once its
results are in and sent next, without asking the model again (bags 2->5 then
5->3 in one message: the second is judged with 5 bags on the reservation; a
read then a write: the write is judged on what the read returned). ``bench
sims`` judges recorded runs the same way, on the recorded results. A ``halt``
is handled like a block (the orchestrator offers no clean way for an agent to
end the run from inside a turn); after ``max_blocks_per_turn`` blocks in one
turn the agent tells the user it cannot complete the action.

``GuardedAgent`` subclasses tau2's ``LLMAgent`` so tau2's builders accept it.
The class is created on first use (:func:`guarded_agent_class`) because tau2 is
an optional extra.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policyguard.decision import Decision
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .domain import to_policyguard
from .guarding import CallChecker

NOT_EXECUTED = "Not executed: another call in the same message was blocked by the policy guard."
GIVE_UP = "I'm sorry, I can't complete that action under our policy. Is there anything else I can help you with?"


class CallEvent(BaseModel):
    """One guard decision on a call the agent attempted (the verdict view)."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    call_id: str
    tool: str
    arguments: dict[str, Any]
    mutating: bool
    outcome: str
    stage: str
    message: str | None = None
    unverified: list[str] = Field(default_factory=list)
    not_met: list[str] = Field(default_factory=list)
    verifier_cost_usd: float | None = None
    verifier_latency_s: float = 0.0
    guard_latency_s: float = 0.0


def _event(turn: int, call: Any, decision: Decision, mutating: bool, latency: float) -> CallEvent:
    usage = decision.usage
    return CallEvent(
        turn=turn,
        call_id=call.id,
        tool=call.name,
        arguments=dict(call.arguments),
        mutating=mutating,
        outcome=decision.outcome,
        stage=decision.stage,
        message=decision.message,
        unverified=decision.unverified,
        not_met=[r.id for r in decision.requirements if r.status == "NOT_MET"],
        verifier_cost_usd=usage.cost_usd if usage is not None else None,
        verifier_latency_s=usage.latency_s if usage is not None else 0.0,
        guard_latency_s=round(latency, 6),
    )


def recorded_answers(after: list[Any]) -> dict[str, Message]:
    """The tool results that follow an assistant message (until the next other message), by call id."""
    answers: dict[str, Message] = {}
    for message in after:
        if not hasattr(message, "tool_messages") and getattr(message, "role", None) != "tool":
            break
        for converted in to_policyguard([message]).messages:
            if converted.tool_call_id is not None:
                answers.setdefault(converted.tool_call_id, converted)
    return answers


def call_by_call(before: Trajectory, content: str | None, calls: list[Any], answers: dict[str, Message]) -> Trajectory:
    """The dialogue on which the last of ``calls`` is judged: ``before``, the message's calls so far, and
    the results of every one of them but the last (the pending call)."""
    pending = [ToolCall(id=c.id, name=c.name, arguments=dict(c.arguments)) for c in calls]
    messages = [*before.messages, Message(role="assistant", content=content, tool_calls=pending)]
    messages += [answers[c.id] for c in calls[:-1] if c.id in answers]
    return Trajectory(messages=messages)


@cache
def guarded_agent_class() -> type:
    """tau2 ``LLMAgent`` subclass that routes every tool call through a guard."""
    from .domain import import_tau2

    import_tau2()  # sets the offline litellm cost map before tau2's agent module imports litellm
    from tau2.agent.llm_agent import LLMAgent
    from tau2.data_model.message import AssistantMessage, MultiToolMessage, ToolMessage

    class GuardedAgent(LLMAgent):  # type: ignore[misc, valid-type]
        """See the module docstring. ``guard=None`` behaves exactly like ``LLMAgent``."""

        def __init__(
            self,
            tools: list[Any],
            domain_policy: str,
            llm: str | None = None,
            llm_args: dict[str, Any] | None = None,
            *,
            guard: CallChecker | None = None,
            is_mutating: Any = None,
            max_blocks_per_turn: int = 4,
        ) -> None:
            super().__init__(tools=tools, domain_policy=domain_policy, llm=llm, llm_args=llm_args)
            self.held: list[Any] = []  # calls of the model's last message that wait for the earlier ones' results
            self.guard = guard
            self.is_mutating = is_mutating or (lambda name: True)
            self.max_blocks_per_turn = max_blocks_per_turn
            self.events: list[CallEvent] = []
            self.turn = 0

        def generate_model_message(self, messages: list[Any]) -> Any:
            """Ask the model for the next assistant message (override in tests)."""
            from tau2.utils.llm_utils import generate

            return generate(model=self.llm, tools=self.tools, messages=messages, **self.llm_args)

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if isinstance(message, MultiToolMessage):
                state.messages.extend(message.tool_messages)
            elif message is not None:
                state.messages.append(message)
            self.turn += 1
            for _ in range(self.max_blocks_per_turn + 1):
                if self.held:  # the rest of the model's last message, now that the first part has run
                    assistant = AssistantMessage(role="assistant", tool_calls=self.held, cost=0.0)
                    self.held = []
                else:
                    assistant = self.generate_model_message(state.system_messages + state.messages)
                blocked = self._review(assistant, state)
                if not blocked:
                    if self.held:
                        assistant = assistant.model_copy(update={"tool_calls": assistant.tool_calls[: -len(self.held)]})
                    state.messages.append(assistant)
                    return assistant, state
                self.held = []
                state.messages.append(assistant)
                for call in assistant.tool_calls or []:
                    text = blocked.get(call.id, NOT_EXECUTED)
                    state.messages.append(
                        ToolMessage(id=call.id, role="tool", content=text, requestor="assistant", error=True)
                    )
            give_up = AssistantMessage(role="assistant", content=GIVE_UP, cost=0.0)
            state.messages.append(give_up)
            return give_up, state

        def _review(self, assistant: Any, state: Any) -> dict[str, str]:
            """Check each call; the remediations of the blocked ones, by call id.

            A mutating call after earlier calls of the message is not judged now:
            it and the calls after it go to :attr:`held`, to be judged once the
            calls before it have run.
            """
            if self.guard is None or not assistant.tool_calls:
                return {}
            before = to_policyguard(state.system_messages + state.messages)
            blocked: dict[str, str] = {}
            calls = list(assistant.tool_calls)
            for position, call in enumerate(calls):
                pending = ToolCall(id=call.id, name=call.name, arguments=dict(call.arguments))
                mutating = bool(self.is_mutating(call.name))
                if mutating and position > 0 and not blocked:
                    self.held = calls[position:]
                    break
                started = time.perf_counter()
                history = call_by_call(before, assistant.content, calls[: position + 1], {})
                decision = self.guard.check(pending, history)
                latency = time.perf_counter() - started
                self.events.append(_event(self.turn, call, decision, mutating, latency))
                if decision.outcome != "allow":
                    blocked[call.id] = decision.message or "This action was blocked by the policy guard."
            return blocked

        def set_seed(self, seed: int) -> None:
            if self.llm is not None:
                super().set_seed(seed)

    return GuardedAgent
