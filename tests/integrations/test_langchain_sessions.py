"""LangChain agents keep the guard's own record of the conversation: what the state forgets still counts.

A goodwill desk (``goodwill_checklist.yaml``): at most one certificate per
conversation, counted over the calls as airline ``certificate-once`` is (a
failed send does not count), proved by the gate. The real
``SummarizationMiddleware`` replaces old messages with a summary (written by a
fake chat model that leaves the certificate out); the guard's session, keyed by
the thread id or else by the invocation, remembers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import SummarizationMiddleware  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from policyguard import Guard  # noqa: E402
from policyguard.integrations.langchain import PolicyGuardMiddleware  # noqa: E402
from policyguard.session.events import decisions

from .test_langchain import call, scripted_chat_model, tool_message, turns  # noqa: E402

HERE = Path(__file__).parent
ONCE = "At most one certificate per conversation"


def make_guard() -> Guard:
    """The goodwill checklist (beside this file) with its gate; no verifier: certificate-once is proved."""
    return Guard.from_files(policy=HERE / "goodwill_policy.md", checklist=HERE / "goodwill_checklist.yaml")


class Desk:
    """The tools; ``sent`` lists every certificate that reached the tool body."""

    def __init__(self, *, seconds: float = 0.0, fail_first: bool = False, ask_first: bool = False) -> None:
        self.sent: list[int] = []
        self.entered: list[float] = []  # when each send began
        self.lock = threading.Lock()

        @tool
        def get_user(user_id: str) -> str:
            """Read a user's profile."""
            return json.dumps({"user_id": user_id, "tier": "gold"})

        @tool
        def send_certificate(user_id: str, amount: int) -> str:
            """Send a goodwill certificate."""
            if ask_first:
                interrupt("approve the certificate?")
            with self.lock:
                self.entered.append(time.monotonic())
                failing = fail_first and len(self.entered) == 1
            time.sleep(seconds)
            if failing:
                return "Error: the certificate service is down"
            with self.lock:
                self.sent.append(amount)
                return json.dumps({"certificate": f"GC-{len(self.sent)}"})

        self.tools = [get_user, send_certificate]


def certificate(call_id: str, amount: int = 50) -> dict[str, Any]:
    return call(call_id, "send_certificate", user_id="u1", amount=amount)


def summariser() -> SummarizationMiddleware:
    """The real middleware, summarising once five messages are in the state and keeping the last two."""
    summary = GenericFakeChatModel(messages=iter([AIMessage("The customer asked about a delayed flight.")] * 5))
    return SummarizationMiddleware(model=summary, trigger=("messages", 5), keep=("messages", 2))


def invoke(agent: Any, text: str, *, asynchronous: bool, thread: str | None = None) -> Any:
    config = {"configurable": {"thread_id": thread}} if thread else None
    state = {"messages": [HumanMessage(text)]}
    return asyncio.run(agent.ainvoke(state, config)) if asynchronous else agent.invoke(state, config)


def shown(model: Any, call_id: str) -> bool:
    """Whether the model's last call was shown anything of ``call_id``."""
    return any(
        (isinstance(m, ToolMessage) and m.tool_call_id == call_id)
        or (isinstance(m, AIMessage) and any(c["id"] == call_id for c in m.tool_calls))
        for m in model.seen[-1]
    )


# -- what a summary removes still counts -----------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_certificate_summarised_out_of_the_thread_blocks_a_second_one(asynchronous):
    """Thread t1: a certificate is sent; a later invocation's summary drops it; the second certificate is refused."""
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(
        [*turns([certificate("c1")], final="Sent."), *turns([certificate("c2")], final="Sorry, only one.")]
    )
    agent = create_agent(
        model, desk.tools, middleware=[summariser(), PolicyGuardMiddleware(guard)], checkpointer=InMemorySaver()
    )
    invoke(agent, "My flight was late, I want a certificate.", asynchronous=asynchronous, thread="t1")
    out = invoke(agent, "And another certificate, please.", asynchronous=asynchronous, thread="t1")
    assert desk.sent == [50]
    blocked = tool_message(out, "c2")
    assert blocked.status == "error" and ONCE in blocked.content
    assert not shown(model, "c1")  # the first certificate was summarised away before the model asked again
    assert [judged for _, judged in decisions(guard.sessions.session_events("t1"))] == ["allow", "block"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_certificate_summarised_away_within_one_invocation_blocks_a_second_one(asynchronous):
    """No thread id: the invocation is the session, and the summary inside it erases nothing from the record."""
    guard, desk = make_guard(), Desk()
    read = call("r1", "get_user", user_id="u1")
    model = scripted_chat_model(turns([certificate("c1")], [read], [certificate("c2")], final="Only one, sorry."))
    agent = create_agent(model, desk.tools, middleware=[summariser(), PolicyGuardMiddleware(guard)])
    out = invoke(agent, "I want a certificate.", asynchronous=asynchronous)
    assert desk.sent == [50]
    assert ONCE in tool_message(out, "c2").content
    assert not shown(model, "c1")


def test_invocations_without_a_thread_id_do_not_share_a_record():
    """One middleware instance serving two conversations with no thread id: each may have its certificate."""
    guard, desk = make_guard(), Desk()
    model = scripted_chat_model(
        [*turns([certificate("c1")], final="Sent."), *turns([certificate("c1")], final="Sent too.")]
    )
    agent = create_agent(model, desk.tools, middleware=[PolicyGuardMiddleware(guard)])
    invoke(agent, "Alice: a certificate, please.", asynchronous=False)
    out = invoke(agent, "Bob: a certificate, please.", asynchronous=False)
    assert desk.sent == [50, 50]
    assert tool_message(out, "c1").status == "success"


def test_a_failed_certificate_does_not_count():
    """The tool's error ToolMessage is the fate the record keeps: the retry is allowed."""
    guard, desk = make_guard(), Desk(fail_first=True)
    model = scripted_chat_model(turns([certificate("c1")], [certificate("c2")], final="Sent on the second try."))
    agent = create_agent(model, desk.tools, middleware=[PolicyGuardMiddleware(guard)], checkpointer=InMemorySaver())
    out = invoke(agent, "A certificate, please.", asynchronous=False, thread="t1")
    assert desk.sent == [50]
    assert tool_message(out, "c2").status == "success"
    results = [e for e in guard.sessions.session_events("t1") if e.kind == "result"]
    assert [(e.call_id, e.is_error) for e in results] == [("c1", True), ("c2", False)]


def test_a_tool_that_raises_leaves_an_unknown_fate_that_still_counts():
    guard = make_guard()

    @tool
    def send_certificate(user_id: str, amount: int) -> str:
        """Send a goodwill certificate."""
        raise ConnectionError("certificate service dropped the connection")

    model = scripted_chat_model(turns([certificate("c1")]))
    get_user = Desk().tools[0]  # the agent has every tool the checklist names
    agent = create_agent(model, [get_user, send_certificate], middleware=[PolicyGuardMiddleware(guard)])
    config = {"configurable": {"thread_id": "t1"}}
    with pytest.raises(ConnectionError):
        agent.invoke({"messages": [HumanMessage("A certificate, please.")]}, config)
    [unknown] = [e for e in guard.sessions.session_events("t1") if e.kind == "unknown"]
    assert unknown.call_id == "c1" and "ConnectionError" in unknown.content
    retry = guard.check(
        {"id": "c2", "name": "send_certificate", "arguments": {"user_id": "u1", "amount": 50}}, [], session="t1"
    )
    assert retry.outcome == "block" and "not known" in (retry.message or "")


def test_a_tool_that_asks_a_person_runs_once_when_the_thread_is_resumed():
    """interrupt() inside the tool: the allowed call waits as unknown, and on resume it runs without a second check."""
    guard, desk = make_guard(), Desk(ask_first=True)
    model = scripted_chat_model(turns([certificate("c1")], final="Sent."))
    agent = create_agent(model, desk.tools, middleware=[PolicyGuardMiddleware(guard)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    paused = agent.invoke({"messages": [HumanMessage("A certificate, please.")]}, config)
    assert paused.get("__interrupt__") and desk.sent == []
    out = agent.invoke(Command(resume="yes"), config)
    assert desk.sent == [50]
    assert tool_message(out, "c1").status == "success"
    kinds = [(e.kind, e.call_id) for e in guard.sessions.session_events("t1") if e.kind != "user"]
    assert kinds == [
        ("call", "c1"),
        ("judge", "c1"),
        ("unknown", "c1"),
        ("result", "c1"),
    ]  # issued, allowed, paused, ran


# -- calls of one message run at once; the guard judges them one after the other --


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_two_certificates_in_one_message_are_judged_one_after_the_other(asynchronous):
    """The tool node runs both calls at once. The first to run fails; the other is judged after that failure, which
    does not count, and is sent. Judged side by side, the second would have been refused for the first."""
    guard, desk = make_guard(), Desk(seconds=0.3, fail_first=True)
    checks: list[float] = []
    real_check, real_acheck = guard.check, guard.acheck

    def timed_check(*args: Any, **kwargs: Any) -> Any:
        checks.append(time.monotonic())
        return real_check(*args, **kwargs)

    async def timed_acheck(*args: Any, **kwargs: Any) -> Any:
        checks.append(time.monotonic())
        return await real_acheck(*args, **kwargs)

    guard.check, guard.acheck = timed_check, timed_acheck  # type: ignore[method-assign]
    model = scripted_chat_model(turns([certificate("c1"), certificate("c2")], final="One certificate sent."))
    agent = create_agent(model, desk.tools, middleware=[PolicyGuardMiddleware(guard)])
    out = invoke(agent, "A certificate, please.", asynchronous=asynchronous)
    assert len(checks) == 2 and max(checks) < desk.entered[0] + 0.3  # both checks began while the first tool ran
    assert len(desk.entered) == 2 and desk.entered[1] >= desk.entered[0] + 0.3  # the second ran after the first
    assert desk.sent == [50]
    answers = {tool_message(out, c).content for c in ("c1", "c2")}
    assert answers == {"Error: the certificate service is down", '{"certificate": "GC-1"}'}
