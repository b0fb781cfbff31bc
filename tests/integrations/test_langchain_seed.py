"""A write in the messages passed to ``invoke`` always counts, with or without a thread id.

The middleware seeds the guard's record with the state's messages in
``before_agent``, which LangChain runs once per invocation before any
``before_model`` hook. The real ``SummarizationMiddleware`` (a fake summary
model that leaves the certificate out) then drops the earlier certificate from
the state before the model runs; the record still has it, so the repeat is
refused. A ``before_agent`` hook that would run before the seed is refused with
a one-line ``ConfigError`` before the model is called.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware, hook_config  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402

from policyguard.errors import ConfigError  # noqa: E402
from policyguard.integrations.langchain import PolicyGuardMiddleware  # noqa: E402

from .test_langchain import call, scripted_chat_model, tool_message, turns  # noqa: E402
from .test_langchain_sessions import ONCE, Desk, certificate, make_guard, shown, summariser  # noqa: E402

THREADS = pytest.mark.parametrize("thread", [None, "t1"], ids=["no-thread-id", "thread-id"])
MODES = pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])


def earlier(result: str = '{"certificate": "GC-7"}', *, status: str = "success") -> list[Any]:
    """A conversation carried over by the caller: a certificate c0 already sent (or failed), then a new request."""
    return [
        HumanMessage("My flight was late, I want a certificate."),
        AIMessage("", tool_calls=[certificate("c0")]),
        ToolMessage(result, tool_call_id="c0", status=status),
        AIMessage("Sent."),
        HumanMessage("And another certificate, please."),
    ]


def run(agent: Any, messages: list[Any], *, asynchronous: bool, thread: str | None) -> Any:
    config = {"configurable": {"thread_id": thread}} if thread else None
    state = {"messages": messages}
    return asyncio.run(agent.ainvoke(state, config)) if asynchronous else agent.invoke(state, config)


def answer(model: Any, call_id: str) -> ToolMessage:
    """The tool's answer to ``call_id`` as the model was shown it."""
    (found,) = {
        m.content: m for seen in model.seen for m in seen if isinstance(m, ToolMessage) and m.tool_call_id == call_id
    }.values()
    return found


def agent_for(guard: Any, desk: Desk, model: Any, *middleware: Any, thread: str | None) -> Any:
    checkpointer = InMemorySaver() if thread else None
    return create_agent(model, desk.tools, middleware=list(middleware), checkpointer=checkpointer)


class Forgetful(AgentMiddleware):  # type: ignore[type-arg]
    """A ``before_agent`` hook that keeps only the newest message (as a trimming or summarising hook might)."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), state["messages"][-1]]}

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)


# -- a write in the messages passed in counts -------------------------------------


@THREADS
@MODES
def test_a_certificate_in_the_messages_passed_in_blocks_a_second_one_after_a_summary_drops_it(thread, asynchronous):
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(turns([certificate("c1")], final="Only one, sorry."))
    agent = agent_for(guard, desk, model, summariser(), PolicyGuardMiddleware(guard), thread=thread)
    out = run(agent, earlier(), asynchronous=asynchronous, thread=thread)
    assert not shown(model, "c0")  # the summary removed the first certificate before the model asked again
    assert desk.sent == []
    blocked = tool_message(out, "c1")
    assert blocked.status == "error" and ONCE in blocked.content


@THREADS
def test_a_before_agent_hook_listed_after_the_guard_cannot_unsee_the_certificate(thread):
    """The guard's hook runs first, so what a later hook removes was already in the record."""
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(turns([certificate("c1")], final="Only one, sorry."))
    agent = agent_for(guard, desk, model, PolicyGuardMiddleware(guard), Forgetful(), thread=thread)
    out = run(agent, earlier(), asynchronous=False, thread=thread)
    assert [type(m).__name__ for m in model.seen[0]] == ["HumanMessage"]  # the hook kept only the new request
    assert desk.sent == []
    assert ONCE in tool_message(out, "c1").content


# -- honest runs still pass ----------------------------------------------------------


@THREADS
@MODES
def test_a_first_certificate_passes_after_a_summary_of_an_unrelated_conversation(thread, asynchronous):
    guard, desk = make_guard(), Desk()
    history = [
        HumanMessage("Who am I?"),
        AIMessage("", tool_calls=[call("r0", "get_user", user_id="u1")]),
        ToolMessage(json.dumps({"user_id": "u1", "tier": "gold"}), tool_call_id="r0"),
        AIMessage("You are a gold member."),
        HumanMessage("My flight was late, I want a certificate."),
    ]
    model = scripted_chat_model(turns([certificate("c1")], final="Sent."))
    agent = agent_for(guard, desk, model, summariser(), PolicyGuardMiddleware(guard), thread=thread)
    out = run(agent, history, asynchronous=asynchronous, thread=thread)
    assert not shown(model, "r0")
    assert desk.sent == [50]
    assert tool_message(out, "c1").status == "success"


@THREADS
def test_a_certificate_that_failed_in_the_messages_passed_in_does_not_count(thread):
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(turns([certificate("c1")], final="Sent this time."))
    agent = agent_for(guard, desk, model, summariser(), PolicyGuardMiddleware(guard), thread=thread)
    out = run(
        agent, earlier("Error: the certificate service is down", status="error"), asynchronous=False, thread=thread
    )
    assert not shown(model, "c0")
    assert desk.sent == [50]
    assert tool_message(out, "c1").status == "success"


def test_each_invocation_without_a_thread_id_is_seeded_with_its_own_messages_only():
    """Alice's carried-over certificate does not reach Bob's invocation through the shared middleware."""
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model([*turns([certificate("c1")], final="No."), *turns([certificate("c1")], final="Sent.")])
    agent = create_agent(model, desk.tools, middleware=[PolicyGuardMiddleware(guard)])
    alice = run(agent, earlier(), asynchronous=False, thread=None)
    bob = run(agent, [HumanMessage("Bob: a certificate, please.")], asynchronous=False, thread=None)
    assert ONCE in tool_message(alice, "c1").content
    assert tool_message(bob, "c1").status == "success" and desk.sent == [50]


# -- what cannot be promised is refused ----------------------------------------------


class Harmless(AgentMiddleware):  # type: ignore[type-arg]
    """A ``before_agent`` hook that changes nothing: the guard cannot see that, so it is refused all the same."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None


@THREADS
@MODES
@pytest.mark.parametrize("hook", [Forgetful, Harmless])
def test_a_before_agent_hook_listed_before_the_guard_is_refused_before_the_model_runs(hook, thread, asynchronous):
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(turns([certificate("c1")]))
    agent = agent_for(guard, desk, model, hook(), PolicyGuardMiddleware(guard), thread=thread)
    with pytest.raises(ConfigError) as refused:
        run(agent, earlier(), asynchronous=asynchronous, thread=thread)
    message = str(refused.value)
    assert "\n" not in message
    assert "1 before_agent hook ran before it" in message
    assert "list PolicyGuardMiddleware ahead of them" in message
    assert model.seen == [] and desk.sent == []


@THREADS
def test_messages_passed_in_that_cannot_be_read_refuse_every_write_of_the_invocation(thread):
    """Two results for c0: which certificate was sent is ambiguous. The summary drops the ambiguity from the state,
    but the invocation's writes stay refused (the record could not take the messages); a read still runs."""
    guard, desk = make_guard(), Desk()
    history = [*earlier(), ToolMessage("Error: timed out", tool_call_id="c0", status="error"), HumanMessage("Well?")]
    model = scripted_chat_model(turns([call("r1", "get_user", user_id="u1")], [certificate("c1")], final="Sorry."))
    agent = agent_for(guard, desk, model, summariser(), PolicyGuardMiddleware(guard), thread=thread)
    run(agent, history, asynchronous=False, thread=thread)
    assert not shown(model, "c0")
    assert answer(model, "r1").status == "success"
    refused = answer(model, "c1")  # the summaries drop the tool messages from the final state; the model read them
    assert refused.status == "error" and "record of it could not be started" in refused.content
    assert desk.sent == []


@pytest.mark.parametrize("limit", [5, 40])
def test_the_order_is_read_the_same_under_any_recursion_limit(limit):
    """The hooks before the guard are counted from LangGraph's remaining steps, which start at the run's limit."""
    config = {"recursion_limit": limit}
    guard = make_guard()
    first = create_agent(
        scripted_chat_model(turns()), Desk().tools, middleware=[PolicyGuardMiddleware(guard), Forgetful()]
    )
    assert first.invoke({"messages": earlier()}, config)["messages"][-1].content == "Done."
    second = create_agent(
        scripted_chat_model(turns()), Desk().tools, middleware=[Forgetful(), PolicyGuardMiddleware(guard)]
    )
    with pytest.raises(ConfigError, match="1 before_agent hook ran before it"):
        second.invoke({"messages": earlier()}, config)


class Shortcut(AgentMiddleware):  # type: ignore[type-arg]
    """A ``before_agent`` hook that jumps straight to the model, past every hook after it."""

    @hook_config(can_jump_to=["model"])
    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"jump_to": "model"}


def test_a_write_in_a_run_whose_seed_was_jumped_past_is_refused_in_one_line():
    """No thread id and the guard's before_agent never ran: nothing vouches for the messages passed in."""
    guard, desk = make_guard(), Desk()
    read = call("r1", "get_user", user_id="u1")
    model = scripted_chat_model(turns([read], [certificate("c1")]))
    agent = create_agent(model, desk.tools, middleware=[Shortcut(), PolicyGuardMiddleware(guard)])
    with pytest.raises(ConfigError) as refused:
        agent.invoke({"messages": earlier()})
    assert "\n" not in str(refused.value) and "before_agent hook did not run" in str(refused.value)
    assert answer(model, "r1").status == "success"  # a read still runs: it needs no record
    assert desk.sent == []
