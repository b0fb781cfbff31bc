"""The drop-in guard for an OpenAI-style tool loop, on the refund desk, with no API key.

Run from the checkout: ``python examples/openai_loop.py`` (needs ``pip install -c constraints.txt -e '.[openai]'``).

Two stand-ins replace the paid parts, and each is a one-line change to make real:

* the agent model: ``ScriptedOpenAI`` answers ``client.chat.completions.create(...)`` with real
  ``ChatCompletion`` objects from a script; use ``client = OpenAI()`` instead;
* the verifier model: ``scripted:...openai_loop.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

The agent first tries to refund more than the order captured: the gate blocks it and the agent
reads the remediation as the tool's error result. After the customer says yes to the captured
amount, the refund is allowed and runs.
"""

from __future__ import annotations

import json
from collections import deque
from types import SimpleNamespace
from typing import Any

from openai.types.chat import ChatCompletion
from refund_desk import CHECKLIST, HERE, POLICY, REFUNDS, TOOL_SCHEMAS, TOOLS, report

from policyguard import Guard, GuardedTools


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


# What the agent model "answers", turn by turn: a tool call, or text for the customer.
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [tool_call("call_1", "find_customer", email="ada@example.com")]},
    {"tool_calls": [tool_call("call_2", "get_order", order_id="O1")]},
    {"tool_calls": [tool_call("call_3", "issue_refund", order_id="O1", amount=120)]},  # more than was captured
    {"content": "I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"},
    {"tool_calls": [tool_call("call_4", "issue_refund", order_id="O1", amount=80)]},
    {"content": "Done: 80.00 USD is refunded on order O1."},
]


class ScriptedOpenAI:
    """Stands in for ``openai.OpenAI()``: the same ``chat.completions.create`` call, scripted answers."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self._script = deque(script)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatCompletion:
        if not self._script:
            raise RuntimeError("the scripted agent model has no answer left")
        message = {"role": "assistant", "content": None, **self._script.popleft()}
        choice = {"index": 0, "finish_reason": "tool_calls" if "tool_calls" in message else "stop", "message": message}
        return ChatCompletion.model_validate(
            {"id": "scripted", "object": "chat.completion", "created": 0, "model": model, "choices": [choice]}
        )


guard = Guard.from_files(
    policy=POLICY,
    checklist=CHECKLIST,
    model=f"scripted:{HERE / 'verdicts' / 'openai_loop.json'}",  # real: model="openai/gpt-4.1-mini"
)
tools = GuardedTools(guard, TOOLS)
client = ScriptedOpenAI(SCRIPT)  # real: client = OpenAI()
messages: list[dict[str, Any]] = [{"role": "system", "content": POLICY.read_text(encoding="utf-8")}]


def customer_says(text: str) -> None:
    """One customer turn: the usual tool loop until the model answers with text."""
    print(f"customer: {text}")
    messages.append({"role": "user", "content": text})
    while True:
        reply = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOL_SCHEMAS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            print(f"agent: {message.content}")
            return
        for call in message.tool_calls:  # read-only calls run; issue_refund is checked first
            refunds_before = len(REFUNDS)
            result = tools.openai_chat(call.model_dump(), messages)
            messages.append(result)
            if call.function.name == "issue_refund":
                ran = len(REFUNDS) > refunds_before
                report(call.function.name, json.loads(call.function.arguments), ran, result["content"])


customer_says("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.")
customer_says("Yes, please refund 80.00 USD.")
print(f"refunds that ran: {REFUNDS}")
