"""A Pydantic AI agent whose tool calls are guarded by a capability, with no API key.

Run from the checkout: ``python examples/pydantic_ai.py``
(needs ``pip install -c constraints.txt -e '.[pydantic-ai]'``).

Two stand-ins replace the paid parts:

* the agent model: Pydantic AI's own ``FunctionModel``, answering each turn from a script;
  use ``Agent("openai:gpt-4.1", ...)`` instead;
* the verifier model: ``scripted:...pydantic_ai.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

Two runs continue one message history, so they share one ``conversation_id`` and the guard keeps
one record. The refund over the captured amount is blocked (the model reads the remediation as a
retry prompt; the tool never runs); the refund the customer said yes to runs.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# pydantic_ai package: import the package with the folder set aside, then put it back.
HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p not in ("", HERE)]
import pydantic_ai  # noqa: E402, F401

sys.path.insert(0, HERE)

import refund_desk as desk  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from policyguard import Guard  # noqa: E402
from policyguard.integrations.pydantic_ai import PolicyGuardCapability  # noqa: E402


def find_customer(email: str) -> str:
    """Look up a customer by email address."""
    return json.dumps(desk.find_customer(email))


def get_order(order_id: str) -> str:
    """Look up one order: its customer and the amount captured."""
    return json.dumps(desk.get_order(order_id))


def issue_refund(order_id: str, amount: float) -> str:
    """Refund money on an order."""
    return json.dumps(desk.issue_refund(order_id, amount))


def calls(call_id: str, name: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args, tool_call_id=call_id)])


def says(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content=text)])


script = deque(
    [
        calls("call_1", "find_customer", email="ada@example.com"),
        calls("call_2", "get_order", order_id="O1"),
        calls("call_3", "issue_refund", order_id="O1", amount=120),  # more than was captured
        says("I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"),
        calls("call_4", "issue_refund", order_id="O1", amount=80),
        says("Done: 80.00 USD is refunded on order O1."),
    ]
)


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The agent model: the next scripted turn (real: a provider model)."""
    return script.popleft()


guard = Guard.from_files(
    policy=desk.POLICY,
    checklist=desk.CHECKLIST,
    model=f"scripted:{desk.HERE / 'verdicts' / 'pydantic_ai.json'}",  # real: model="openai/gpt-4.1-mini"
)
agent = Agent(
    FunctionModel(scripted),  # real: "openai:gpt-4.1"
    instructions=desk.POLICY.read_text(encoding="utf-8"),
    tools=[find_customer, get_order, issue_refund],
    capabilities=[PolicyGuardCapability(guard)],
)


def show(new_messages: list[ModelMessage]) -> None:
    """Each refund the model asked for: ran (a tool return) or blocked (a return with outcome "retried",
    whose content is the remediation the model reads)."""
    asked = {p.tool_call_id: p for m in new_messages for p in m.parts if isinstance(p, ToolCallPart)}
    for message in new_messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "issue_refund":
                arguments = asked[part.tool_call_id].args_as_dict()
                desk.report("issue_refund", arguments, part.outcome == "success", str(part.content))


history: list[ModelMessage] = []
for text in ("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.",
             "Yes, please refund 80.00 USD."):  # fmt: skip
    print(f"customer: {text}")
    result = agent.run_sync(text, message_history=history)
    show(result.new_messages())
    history = result.all_messages()
    print(f"agent: {result.output}")
print(f"refunds that ran: {desk.REFUNDS}")
