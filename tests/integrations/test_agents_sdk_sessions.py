"""Agents SDK runs keep the guard's own record of the conversation: what the model is no longer sent still counts.

A goodwill desk (``goodwill_checklist.yaml``): at most one certificate per
conversation, counted over the calls as airline ``certificate-once`` is (a
failed send does not count), proved by the gate. A real ``SQLiteSession`` with
``SessionSettings(limit=N)`` sends the model only the newest items; the
guard's session, keyed by the SDK session's id (``guarded_session``) or else by
the run, remembers.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, SQLiteSession, function_tool  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402

from policyguard import Guard  # noqa: E402
from policyguard.integrations.agents_sdk import guard_agent, guarded_session  # noqa: E402
from policyguard.session.events import decisions as record_decisions  # noqa: E402

from .test_agents_sdk import NO_TRACING, ScriptedAgentModel, call, decisions, say  # noqa: E402

HERE = Path(__file__).parent
ONCE = "At most one certificate per conversation"


def make_guard() -> Guard:
    """The goodwill checklist (beside this file) with its gate; no verifier: certificate-once is proved."""
    return Guard.from_files(policy=HERE / "goodwill_policy.md", checklist=HERE / "goodwill_checklist.yaml")


class Desk:
    """The tools; ``sent`` lists every certificate that reached the tool body."""

    def __init__(self, *, seconds: float = 0.0, fail_first: bool = False, raises: bool = False) -> None:
        self.sent: list[int] = []
        self.entered: list[float] = []  # when each send began

        @function_tool
        def get_user(user_id: str) -> str:
            """Read a user's profile."""
            return json.dumps({"user_id": user_id, "tier": "gold"})

        @function_tool(failure_error_function=None)  # a tool error stops the run: no output comes
        async def send_certificate(user_id: str, amount: int) -> str:
            """Send a goodwill certificate."""
            self.entered.append(time.monotonic())
            failing = fail_first and len(self.entered) == 1
            await asyncio.sleep(seconds)
            if raises:
                raise ConnectionError("certificate service dropped the connection")
            if failing:
                return "Error: the certificate service is down"
            self.sent.append(amount)
            return json.dumps({"certificate": f"GC-{len(self.sent)}"})

        self.tools = [get_user, send_certificate]


def certificate(call_id: str, amount: int = 50) -> Any:
    return call(call_id, "send_certificate", {"user_id": "u1", "amount": amount})


def agent(model: ScriptedAgentModel, desk: Desk, guard: Guard) -> Agent[Any]:
    return guard_agent(Agent(name="desk", instructions="Goodwill desk.", tools=desk.tools, model=model), guard)


def run(guarded: Agent[Any], text: str, **options: Any) -> Any:
    return asyncio.run(Runner.run(guarded, text, run_config=NO_TRACING, **options))


def sent_to_model(model: ScriptedAgentModel, call_id: str) -> bool:
    """Whether the model's last input held anything of ``call_id``."""
    return any(item.get("call_id") == call_id for item in model.inputs[-1] if isinstance(item, dict))


# -- what the session window drops still counts -----------------------------------


def test_a_certificate_outside_the_session_window_blocks_a_second_one():
    """SessionSettings(limit=2): the second run's model sees neither the first certificate nor its result."""
    guard, desk = make_guard(), Desk()
    model = ScriptedAgentModel(
        [certificate("c1")], [say("Sent.")], [certificate("c2")], [say("Only one per conversation, sorry.")]
    )
    session = guarded_session(SQLiteSession("conv-1", session_settings=SessionSettings(limit=2)))
    guarded = agent(model, desk, guard)
    run(guarded, "My flight was late, I want a certificate.", session=session)
    result = run(guarded, "And another certificate, please.", session=session)
    assert desk.sent == [50]
    assert not sent_to_model(model, "c1") and sent_to_model(model, "c2")  # the window dropped the first send
    [decision] = decisions(result)
    assert decision.outcome == "block" and ONCE in (decision.message or "")
    assert [judged for _, judged in record_decisions(guard.sessions.session_events("conv-1"))] == ["allow", "block"]


def test_runs_without_a_session_do_not_share_a_record():
    """Each run is its own conversation when no SDK session names it: two customers, one certificate each."""
    guard, desk = make_guard(), Desk()
    model = ScriptedAgentModel([certificate("c1")], [say("Sent.")], [certificate("c1")], [say("Sent too.")])
    guarded = agent(model, desk, guard)
    run(guarded, "Alice: a certificate, please.")
    result = run(guarded, "Bob: a certificate, please.")
    assert desk.sent == [50, 50]
    assert [d.outcome for d in decisions(result)] == ["allow"]


def test_a_tool_that_raises_counts_as_sent_and_the_next_run_is_not_held_up():
    """The run fails with the tool's error; no output ever came. The next run of the session does not wait for it:
    the certificate counts as done (its fate unknown) and the second one is refused at once."""
    guard, desk = make_guard(), Desk(raises=True)
    model = ScriptedAgentModel([certificate("c1")], [certificate("c2")], [say("Sorry.")])
    session = guarded_session(SQLiteSession("conv-2"))
    guarded = agent(model, desk, guard)
    with pytest.raises(Exception, match="certificate service dropped the connection"):
        run(guarded, "A certificate, please.", session=session)
    started = time.monotonic()
    result = run(guarded, "Did it work? Send it again.", session=session)
    assert time.monotonic() - started < guard.session_wait_s / 3
    [decision] = decisions(result)
    assert decision.outcome == "block" and "not known" in (decision.message or "")
    assert [e.kind for e in guard.sessions.session_events("conv-2") if e.call_id == "c1"] == [
        "call",
        "judge",
        "unknown",
    ]  # issued, allowed, fate unknown


# -- calls of one message run at once; the guard judges them one after the other --


def test_two_certificates_in_one_message_are_judged_one_after_the_other():
    """The SDK runs both calls at once. The first to run fails; the other is judged after that failure, which does
    not count, and is sent."""
    guard, desk = make_guard(), Desk(seconds=0.3, fail_first=True)
    checks: list[float] = []
    real = guard.acheck

    async def timed(*args: Any, **kwargs: Any) -> Any:
        checks.append(time.monotonic())
        return await real(*args, **kwargs)

    guard.acheck = timed  # type: ignore[method-assign]
    model = ScriptedAgentModel([certificate("c1"), certificate("c2")], [say("One certificate sent.")])
    result = run(agent(model, desk, guard), "A certificate, please.")
    assert len(checks) == 2 and max(checks) < desk.entered[0] + 0.3  # both checks began while the first tool ran
    assert len(desk.entered) == 2 and desk.entered[1] >= desk.entered[0] + 0.3  # the second ran after the first
    assert desk.sent == [50]
    assert [d.outcome for d in decisions(result)] == ["allow", "allow"]
    outputs = set(model.outputs(1).values())
    assert outputs == {"Error: the certificate service is down", json.dumps({"certificate": "GC-1"})}


# -- what guarded_session wraps -------------------------------------------------------


def test_a_guarded_session_is_the_wrapped_session_to_the_sdk():
    inner = SQLiteSession("conv-3", session_settings=SessionSettings(limit=3))
    session = guarded_session(inner)
    assert guarded_session(session) is session
    assert session.session_id == "conv-3" and session.session_settings is inner.session_settings
    asyncio.run(session.add_items([{"role": "user", "content": "hello"}]))
    assert asyncio.run(inner.get_items()) == [{"role": "user", "content": "hello"}]


def test_an_openai_conversations_session_is_refused_rather_than_changed():
    """The SDK treats that class apart (the history is on OpenAI's servers); a wrapper would hide it."""
    from agents.memory import OpenAIConversationsSession
    from openai import AsyncOpenAI

    from policyguard.errors import ConfigError

    server_side = OpenAIConversationsSession(conversation_id="conv_x", openai_client=AsyncOpenAI(api_key="unused"))
    with pytest.raises(ConfigError, match="OpenAIConversationsSession"):
        guarded_session(server_side)
