"""Every host that runs the agent's tools gives the guard its read-only ones (issue 33).

A cancel whose order the agent never read is blocked for "read the order first"
without them; with them the guard reads the order itself and judges the cancel
on it: the owner's cancel runs, another user's order or a failed read keeps the
block. The guard's read never appears in the agent's conversation.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests import fetchshop as shop


def _fetched(guard: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(e["tool"], e["arguments"]) for e in guard.trace.events if e["event"] == "fetch"]


# -- LangChain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize(("order_id", "runs"), [("O1", True), ("O2", False)], ids=["own-order", "other-users"])
def test_langchain_hands_the_agents_read_tools_to_the_guard(asynchronous: bool, order_id: str, runs: bool) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from policyguard.integrations.langchain import PolicyGuardMiddleware
    from tests.integrations.test_langchain import scripted_chat_model

    cancelled: list[str] = []

    @tool
    def get_user(user_id: str) -> str:
        """Read a user's profile."""
        return json.dumps(shop.get_user(user_id))

    @tool
    def get_order(order_id: str) -> str:
        """Read an order."""
        return json.dumps(shop.get_order(order_id))

    @tool
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        cancelled.append(order_id)
        return "cancelled"

    guard = shop.guard()
    model = scripted_chat_model(
        [
            AIMessage("", tool_calls=[{"name": "get_user", "args": {"user_id": "ann"}, "id": "c1"}]),
            AIMessage("", tool_calls=[{"name": "cancel_order", "args": {"order_id": order_id}, "id": "c2"}]),
            AIMessage("Done."),
        ]
    )
    agent = create_agent(model, [get_user, get_order, cancel_order], middleware=[PolicyGuardMiddleware(guard)])
    state = {"messages": [HumanMessage("I am ann, cancel my order.")]}
    out = asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert cancelled == ([order_id] if runs else [])
    assert _fetched(guard) == [("get_order", {"order_id": order_id})]
    answers = {m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers == {"c1", "c2"}  # the guard's read is not in the agent's messages
    assert not any('"user_id": "bob"' in str(m.content) for m in out["messages"])  # nor what it read


# -- the Agents SDK ----------------------------------------------------------------------------


@pytest.mark.parametrize(("order_id", "runs"), [("O1", True), ("O2", False)], ids=["own-order", "other-users"])
def test_the_agents_sdk_hands_the_agents_read_tools_to_the_guard(order_id: str, runs: bool) -> None:
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool

    from policyguard.integrations.agents_sdk import guard_agent
    from tests.integrations.test_agents_sdk import NO_TRACING, ScriptedAgentModel, call, say

    cancelled: list[str] = []

    @function_tool
    def get_user(user_id: str) -> str:
        """Read a user's profile."""
        return json.dumps(shop.get_user(user_id))

    @function_tool
    def get_order(order_id: str) -> str:
        """Read an order."""
        return json.dumps(shop.get_order(order_id))

    @function_tool
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        cancelled.append(order_id)
        return "cancelled"

    guard = shop.guard()
    model = ScriptedAgentModel(
        [call("c1", "get_user", {"user_id": "ann"})],
        [call("c2", "cancel_order", {"order_id": order_id})],
        [say("Done.")],
    )
    agent = guard_agent(Agent(name="shop", tools=[get_user, get_order, cancel_order], model=model), guard)
    asyncio.run(Runner.run(agent, "I am ann, cancel my order.", run_config=NO_TRACING))
    assert cancelled == ([order_id] if runs else [])
    assert _fetched(guard) == [("get_order", {"order_id": order_id})]
    assert set(model.outputs(2)) == {"c1", "c2"}  # the model is shown its own calls' outputs only


# -- the MCP proxy -----------------------------------------------------------------------------


class Upstream:
    """The upstream server's tools, as the proxy's ClientSession calls them; records every call."""

    def __init__(self, answer: Any = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answer = answer

    async def call_tool(self, name: str, arguments: dict[str, Any], **options: Any) -> Any:
        import mcp_types as types

        self.calls.append((name, arguments))
        if isinstance(self.answer, Exception):
            raise self.answer
        order = self.answer if self.answer is not None else shop.ORDERS[arguments["order_id"]]
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(order))])


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [(None, "allow"), (shop.ORDERS["O2"], "block"), (TimeoutError("upstream down"), "block")],
    ids=["reads-the-order", "answers-another-order", "fails"],
)
def test_the_mcp_proxy_hands_the_upstreams_read_tools_to_the_guard(answer: Any, outcome: str) -> None:
    pytest.importorskip("mcp")
    import mcp_types as types

    from policyguard.integrations.mcp_proxy import GuardedUpstream

    guard, upstream = shop.guard(), Upstream(answer)
    proxied = GuardedUpstream(guard, upstream)  # type: ignore[arg-type]  # duck-typed upstream
    proxied.tools = {
        n: types.Tool(name=n, input_schema={"type": "object"})
        for n in ("get_user", "get_order", "cancel_order", "other")
    }

    async def judge() -> str:
        fetch = proxied._fetch()
        assert fetch is not None and fetch.names == {"get_user", "get_order"}  # never a write, never unknown
        return (await guard.acheck(shop.cancel("O1"), shop.signed_in(), fetch=fetch)).outcome

    assert asyncio.run(judge()) == outcome
    assert upstream.calls == [("get_order", {"order_id": "O1"})]


def test_a_loop_fetcher_never_waits_on_its_own_loop() -> None:
    from policyguard.guard.fetching import Answer
    from policyguard.integrations.hostfetch import LoopFetcher

    async def read(tool: str, arguments: dict[str, Any]) -> Answer:
        return Answer("{}")

    async def on_the_loop() -> None:
        fetch = LoopFetcher.here(read, ["get_order"])
        assert fetch is not None
        with pytest.raises(RuntimeError, match="cannot wait on the loop"):
            fetch("get_order", {})
        with pytest.raises(LookupError):
            await asyncio.to_thread(fetch, "cancel_order", {})
        assert (await asyncio.to_thread(fetch, "get_order", {})).content == "{}"

    asyncio.run(on_the_loop())
    assert LoopFetcher.here(read, []) is None
