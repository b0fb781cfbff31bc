"""Test doubles for tau2 runs without a model: a scripted agent and a scripted user.

The agent is a :func:`~policyguard.bench.tau2.agent.guarded_agent_class` subclass
whose "LLM" is a list of steps - ``("call", tool, args)`` or ``("say", text)``
- emitted as real tau2 ``AssistantMessage`` objects, so tau2's orchestrator
and evaluator treat it like any agent. A blocked call consumes its step and
the agent simply moves on to the next one. The user plays its lines in order
and ends with ``###STOP###``. Both raise when the script runs out, so a test
cannot silently pass on a dialogue it did not expect.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from policyguard.errors import ScriptedModelError

Step = tuple[str, ...] | tuple[str, str, dict[str, Any]]


@cache
def scripted_agent_class() -> type:
    from tau2.data_model.message import AssistantMessage
    from tau2.data_model.message import ToolCall as Tau2ToolCall

    from .agent import guarded_agent_class

    base = guarded_agent_class()

    class ScriptedAgent(base):  # type: ignore[misc, valid-type]
        """Plays ``script``; records every message the model would have been shown."""

        def __init__(self, tools: list[Any], domain_policy: str, script: list[Any], **kwargs: Any) -> None:
            super().__init__(tools=tools, domain_policy=domain_policy, llm=None, **kwargs)
            self.script = list(script)
            self.prompts: list[list[Any]] = []
            self._ids = 0

        def generate_model_message(self, messages: list[Any]) -> Any:
            self.prompts.append(list(messages))
            if not self.script:
                raise ScriptedModelError("the scripted agent ran out of steps")
            step = self.script.pop(0)
            if step[0] == "say":
                return AssistantMessage(role="assistant", content=step[1], cost=0.0)
            if step[0] == "call":
                self._ids += 1
                call = Tau2ToolCall(id=f"s{self._ids}", name=step[1], arguments=dict(step[2]))
                return AssistantMessage(role="assistant", tool_calls=[call], cost=0.0)
            raise ScriptedModelError(f"unknown scripted step {step[0]!r}")

    return ScriptedAgent


@cache
def scripted_user_class() -> type:
    from tau2.data_model.message import UserMessage
    from tau2.user.base import STOP, BaseUser, UserState

    class ScriptedUser(BaseUser):  # type: ignore[misc]
        """Says ``lines`` in order, then ``###STOP###``."""

        def __init__(self, lines: list[str]) -> None:
            super().__init__(instructions=None, llm=None)
            self.lines = list(lines)
            self.stopped = False

        def get_init_state(self, message_history: list[Any] | None = None) -> Any:
            return UserState(system_messages=[], messages=list(message_history or []))

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            state.messages.append(message)
            if self.lines:
                text = self.lines.pop(0)
            elif not self.stopped:
                self.stopped = True
                text = STOP
            else:
                raise ScriptedModelError("the scripted user was asked to speak after it stopped")
            reply = UserMessage(role="user", content=text, cost=0.0)
            state.messages.append(reply)
            return reply, state

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return bool(message.content) and STOP in message.content

        def set_seed(self, seed: int) -> None:
            return None

    return ScriptedUser
