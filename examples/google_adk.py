"""A Google ADK agent whose tool calls are guarded by a runner plugin, with no API key.

Run from the checkout: ``python examples/google_adk.py``
(needs ``pip install -c constraints.txt -e '.[google-adk]'``).

Two stand-ins replace the paid parts:

* the agent model: a ``BaseLlm`` subclass answering each turn from a script; use
  ``LlmAgent(model="gemini-2.5-flash", ...)`` instead (with a Gemini key);
* the verifier model: ``scripted:...google_adk.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

Both turns run in one ADK session, so the guard keeps one record of it. The refund over the captured
amount is blocked (the model reads the remediation as the tool's result; the tool never runs); the
refund the customer said yes to runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import refund_desk as desk  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.models import BaseLlm, LlmRequest, LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402

from policyguard import Guard  # noqa: E402
from policyguard.integrations.google_adk import guard_plugin  # noqa: E402


def find_customer(email: str) -> str:
    """Look up a customer by email address."""
    return json.dumps(desk.find_customer(email))


def get_order(order_id: str) -> str:
    """Look up one order: its customer and the amount captured."""
    return json.dumps(desk.get_order(order_id))


def issue_refund(order_id: str, amount: float) -> str:
    """Refund money on an order."""
    return json.dumps(desk.issue_refund(order_id, amount))


def calls(call_id: str, name: str, **args: Any) -> types.Content:
    return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(id=call_id, name=name,
                                                                                          args=args))])  # fmt: skip


def says(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


class ScriptedModel(BaseLlm):
    """The agent model: the next scripted turn (real: a Gemini model name)."""

    model: str = "scripted"
    script: list[types.Content] = [
        calls("call_1", "find_customer", email="ada@example.com"),
        calls("call_2", "get_order", order_id="O1"),
        calls("call_3", "issue_refund", order_id="O1", amount=120),  # more than was captured
        says("I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"),
        calls("call_4", "issue_refund", order_id="O1", amount=80),
        says("Done: 80.00 USD is refunded on order O1."),
    ]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0, candidates_token_count=0)
        yield LlmResponse(content=self.script.pop(0), usage_metadata=usage)


guard = Guard.from_files(
    policy=desk.POLICY,
    checklist=desk.CHECKLIST,
    model=f"scripted:{desk.HERE / 'verdicts' / 'google_adk.json'}",  # real: model="openai/gpt-4.1-mini"
)
agent = LlmAgent(
    name="refund_desk",
    model=ScriptedModel(),  # real: "gemini-2.5-flash"
    instruction=desk.POLICY.read_text(encoding="utf-8"),
    tools=[find_customer, get_order, issue_refund],
)
runner = InMemoryRunner(app=App(name="refund_desk", root_agent=agent, plugins=[guard_plugin(guard)]))


def show(events: list[Any]) -> str:
    """Each refund the model asked for: ran, or blocked (its response is ``{"error": <the remediation>}``, which
    the model reads). Returns the agent's last text."""
    asked = {c.id: c for e in events for c in e.get_function_calls()}
    for event in events:
        for answer in event.get_function_responses():
            if answer.name == "issue_refund":
                response = answer.response or {}
                blocked = "error" in response
                text = response["error"] if blocked else str(response.get("result", response))
                desk.report("issue_refund", dict(asked[answer.id].args or {}), not blocked, text)
    texts = [p.text for e in events if e.content for p in e.content.parts or [] if p.text]
    return texts[-1] if texts else ""


async def main() -> None:
    session = await runner.session_service.create_session(app_name="refund_desk", user_id="ada")
    for text in ("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.",
                 "Yes, please refund 80.00 USD."):  # fmt: skip
        print(f"customer: {text}")
        message = types.Content(role="user", parts=[types.Part(text=text)])
        events = [e async for e in runner.run_async(user_id="ada", session_id=session.id, new_message=message)]
        print(f"agent: {show(events)}")
    print(f"refunds that ran: {desk.REFUNDS}")


asyncio.run(main())
