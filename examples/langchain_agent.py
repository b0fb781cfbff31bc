"""A LangChain 1.x agent (``create_agent``) guarded by PolicyGuardMiddleware, with no API key.

Run from the checkout: ``python examples/langchain_agent.py``
(needs ``pip install -c constraints.txt -e '.[langchain]'``).

Two stand-ins replace the paid parts:

* the agent model: ``ScriptedChatModel``, langchain_core's ``GenericFakeChatModel`` playing back
  ``AIMessage``s with tool calls; use any chat model instead, e.g. ``init_chat_model("openai:gpt-4.1")``;
* the verifier model: ``scripted:...langchain_agent.json`` plays back a recorded verdict; use
  ``model="openai/gpt-4.1-mini"`` (with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``).

The conversation lives in a checkpointer under one thread id, which is also the guard's record
of the conversation. The refund over the captured amount is blocked (the model gets the
remediation as an error ``ToolMessage``); the refund the customer said yes to runs.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from refund_desk import CHECKLIST, HERE, POLICY, REFUNDS, find_customer, get_order, issue_refund, report

from policyguard import Guard
from policyguard.integrations.langchain import GuardHalted, PolicyGuardMiddleware


class ScriptedChatModel(GenericFakeChatModel):
    """The fake chat model, made to accept tools (``create_agent`` binds them; the script ignores them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def calls(call_id: str, name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": name, "args": args}])


model = ScriptedChatModel(
    messages=iter(
        [
            calls("call_1", "find_customer", email="ada@example.com"),
            calls("call_2", "get_order", order_id="O1"),
            calls("call_3", "issue_refund", order_id="O1", amount=120),  # more than was captured
            AIMessage("I can refund up to the 80.00 USD captured for order O1. Shall I refund 80.00 USD?"),
            calls("call_4", "issue_refund", order_id="O1", amount=80),
            AIMessage("Done: 80.00 USD is refunded on order O1."),
        ]
    )
)
guard = Guard.from_files(
    policy=POLICY,
    checklist=CHECKLIST,
    model=f"scripted:{HERE / 'verdicts' / 'langchain_agent.json'}",  # real: model="openai/gpt-4.1-mini"
)
agent = create_agent(
    model,
    [tool(find_customer), tool(get_order), tool(issue_refund)],  # the desk's plain functions, as LangChain tools
    system_prompt=POLICY.read_text(encoding="utf-8"),
    middleware=[PolicyGuardMiddleware(guard)],  # keep it last in the list
    checkpointer=InMemorySaver(),
)
config: Any = {"configurable": {"thread_id": "customer-ada"}}  # the guard's session for this conversation
shown = 0


def customer_says(text: str) -> None:
    global shown
    print(f"customer: {text}")
    try:
        result = agent.invoke({"messages": [HumanMessage(text)]}, config)
    except GuardHalted as halted:  # the guard ended the run
        print("halted:", halted.decision.message)
        raise SystemExit(1) from None
    new, shown = result["messages"][shown:], len(result["messages"])
    asked = {c["id"]: c["args"] for m in new if isinstance(m, AIMessage) for c in m.tool_calls}
    for message in new:
        if isinstance(message, ToolMessage) and message.name == "issue_refund":
            report(message.name, asked[message.tool_call_id], message.status != "error", str(message.content))
    print(f"agent: {new[-1].content}")


customer_says("Hi, I'm ada@example.com. Order O1 arrived broken; please refund the 120 USD I paid.")
customer_says("Yes, please refund 80.00 USD.")
print(f"refunds that ran: {REFUNDS}")
