"""An OpenAI Agents SDK agent whose function tools are guarded, with no API key.

Run from the checkout: ``python examples/agents_sdk.py`` (needs ``pip install -c constraints.txt -e '.[agents]'``).

Two stand-ins replace the paid parts:

* the agent model: ``ScriptedAgentModel``, an ``agents.Model`` that answers each turn from a
  script of Responses output items; use ``model="gpt-4.1"`` on the ``Agent`` instead;
* the verifier model: ``scripted:...agents_sdk.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

Two runs share one SDK session, wrapped by ``guarded_session`` so the guard keeps one record
of the conversation. The refund over the captured amount is blocked (the model gets
``"Error: <remediation>"`` as the tool's result); the refund the customer said yes to runs.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

import refund_desk as desk
from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, function_tool
from agents.items import ToolCallOutputItem
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from policyguard import Guard
from policyguard.integrations.agents_sdk import guard_agent, guarded_session


@function_tool
def find_customer(email: str) -> str:
    """Look up a customer by email address."""
    return json.dumps(desk.find_customer(email))  # JSON text: a dict would reach the model as Python text


@function_tool
def get_order(order_id: str) -> str:
    """Look up one order: its customer and the amount captured."""
    return json.dumps(desk.get_order(order_id))


@function_tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund money on an order."""
    return json.dumps(desk.issue_refund(order_id, amount))


def calls(call_id: str, name: str, **args: Any) -> list[Any]:
    return [
        ResponseFunctionToolCall(
            type="function_call", id=f"fc_{call_id}", call_id=call_id, name=name, arguments=json.dumps(args)
        )
    ]


def says(text: str) -> list[Any]:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return [ResponseOutputMessage(type="message", id="msg", role="assistant", status="completed", content=content)]


class ScriptedAgentModel(Model):
    """An ``agents.Model`` that answers each model turn with the next scripted output items."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = deque(turns)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if not self.turns:
            raise RuntimeError("the scripted agent model has no answer left")
        return ModelResponse(output=self.turns.popleft(), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example runs Runner.run, not run_streamed")


model = ScriptedAgentModel(
    calls("call_1", "find_customer", email="ada@example.com"),
    calls("call_2", "get_order", order_id="O1"),
    calls("call_3", "issue_refund", order_id="O1", amount=120),  # more than was captured
    says("I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"),
    calls("call_4", "issue_refund", order_id="O1", amount=80),
    says("Done: 80.00 USD is refunded on order O1."),
)
guard = Guard.from_files(
    policy=desk.POLICY,
    checklist=desk.CHECKLIST,
    model=f"scripted:{desk.HERE / 'verdicts' / 'agents_sdk.json'}",  # real: model="openai/gpt-4.1-mini"
)
agent = guard_agent(
    Agent(
        name="refund desk",
        instructions=desk.POLICY.read_text(encoding="utf-8"),
        model=model,  # real: model="gpt-4.1"
        tools=[find_customer, get_order, issue_refund],
    ),
    guard,
)
session = guarded_session(SQLiteSession("customer-ada"))  # the guard's session is this session's id
run_config = RunConfig(tracing_disabled=True)  # the SDK's tracing would upload to OpenAI


async def customer_says(text: str) -> None:
    print(f"customer: {text}")
    result = await Runner.run(agent, text, session=session, run_config=run_config)
    asked = {i.raw_item.call_id: i.raw_item.arguments for i in result.new_items if i.type == "tool_call_item"}
    outputs = {i.raw_item["call_id"]: i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)}
    for checked in result.tool_input_guardrail_results:  # one per guarded call: the guard's Decision
        decision = checked.output.output_info
        arguments = json.loads(asked[decision.call_id])
        desk.report(decision.tool, arguments, decision.outcome == "allow", outputs[decision.call_id])
    print(f"agent: {result.final_output}")


async def main() -> None:
    await customer_says("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.")
    await customer_says("Yes, please refund 80.00 USD.")
    print(f"refunds that ran: {desk.REFUNDS}")


asyncio.run(main())
