"""The Google ADK plugin: a block never runs the tool, an escalation pauses on ADK's tool confirmation, results
are recorded, and the record of an ADK session holds what its events no longer show.

Every run goes through ADK's own ``InMemoryRunner`` with a scripted ``BaseLlm`` (no key, no network). The
credit desk of tests/session/credits.py: one goodwill credit per conversation, a limit only raised.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "google.adk", reason="the Google ADK plugin needs: pip install -c constraints.txt -e '.[google-adk]'"
)

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.models import BaseLlm, LlmResponse  # noqa: E402
from google.adk.plugins import BasePlugin  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402
from pydantic import Field  # noqa: E402

from policyguard import Guard, HardGate, parse_checklist  # noqa: E402
from policyguard.approvals.flow import decide  # noqa: E402
from policyguard.approvals.url import open_approvals  # noqa: E402
from policyguard.decision import Decision  # noqa: E402
from policyguard.errors import ConfigError, FormatError  # noqa: E402
from policyguard.integrations import google_adk  # noqa: E402
from policyguard.integrations.google_adk import GuardHalted, guard_plugin, record_key, trajectory  # noqa: E402
from policyguard.session import MemorySessionStore  # noqa: E402
from policyguard.trajectory.canonical import policy_version  # noqa: E402
from tests.session.credits import CHECKLIST, POLICY, Desk, make_guard  # noqa: E402

APP, USER = "desk", "u1"
CREDIT = {"user_id": "u1", "amount": 50}
Turn = list[tuple[str, str, dict[str, Any]]] | str


class ScriptedLlm(BaseLlm):
    """A model answering each request with the next turn: function calls (id, tool, args) in one event, or a text.
    ``requests`` keeps what it was sent; asking past the script fails the test."""

    model: str = "scripted"
    turns: list[Any] = Field(default_factory=list)
    requests: list[Any] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
        self.requests.append(llm_request)
        assert self.turns, "the model was asked for more turns than the script has"
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            parts = [types.Part(text=turn)]
        else:
            parts = [types.Part(function_call=types.FunctionCall(id=i, name=n, args=a)) for i, n, a in turn]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def guard() -> Guard:
    return make_guard(sessions=MemorySessionStore(), session_result_wait_s=0)


class Desktop:
    """One ADK app on the desk: an ``InMemoryRunner`` with the guard's plugin, and one session."""

    def __init__(
        self, *turns: Turn, desk: Desk | None = None, guard: Guard | None = None, tools: Any = None, **agent: Any
    ) -> None:
        self.desk = desk or Desk()
        self.guard = guard or make_guard(sessions=MemorySessionStore(), session_result_wait_s=0)
        self.model = ScriptedLlm(turns=list(turns))
        plugins = [guard_plugin(self.guard), *agent.pop("plugins", [])]
        root = LlmAgent(name="desk", model=self.model, tools=tools or self.desk.tools(), **agent)
        self.runner = InMemoryRunner(app=App(name=APP, root_agent=root, plugins=plugins))
        self.session_id = asyncio.run(self.runner.session_service.create_session(app_name=APP, user_id=USER)).id

    def say(self, *parts: types.Part | str) -> list[Any]:
        """One user turn (text or function responses); the events it produced."""
        content = types.Content(role="user", parts=[types.Part(text=p) if isinstance(p, str) else p for p in parts])

        async def run() -> list[Any]:
            return [
                e async for e in self.runner.run_async(user_id=USER, session_id=self.session_id, new_message=content)
            ]

        return asyncio.run(run())

    def stored(self) -> Any:
        """The session as the in-memory service keeps it (its events can be edited, as a store could drop them)."""
        return self.runner.session_service.sessions[APP][USER][self.session_id]

    def key(self) -> str:
        return record_key(self.stored())

    def response(self, call_id: str) -> dict[str, Any]:
        """The (last) function response ADK recorded for ``call_id``."""
        found = [
            p.function_response.response
            for e in self.stored().events
            for p in (e.content.parts if e.content else [])
            if p.function_response is not None and p.function_response.id == call_id
        ]
        assert found, f"no response for {call_id}"
        return found[-1]

    def confirmation_request(self) -> types.FunctionCall:
        [call] = [
            p.function_call
            for e in self.stored().events
            for p in (e.content.parts if e.content else [])
            if p.function_call is not None and p.function_call.name == "adk_request_confirmation"
        ]
        return call


def confirm(request: types.FunctionCall, confirmed: bool) -> types.Part:
    """The client's answer to ADK's confirmation request."""
    answer = types.FunctionResponse(id=request.id, name="adk_request_confirmation", response={"confirmed": confirmed})
    return types.Part(function_response=answer)


# -- decisions ---------------------------------------------------------------------------


def test_a_second_credit_never_runs_and_the_model_reads_the_remediation() -> None:
    app = Desktop([("c1", "send_credit", CREDIT)], [("c2", "send_credit", CREDIT)], "Only one credit.")
    app.say("Two goodwill credits please.")
    assert app.desk.names() == ["send_credit"]
    assert app.response("c1") == {"result": "credit sent"}
    assert "credit-once" in app.response("c2")["error"]
    model_saw = [p.function_response for c in app.model.requests[-1].contents for p in c.parts if p.function_response]
    assert any(r.id == "c2" and "credit-once" in r.response["error"] for r in model_saw)


def test_an_error_in_the_guard_blocks_the_call() -> None:
    class Broken(Guard):
        async def acheck(self, *args: Any, **kwargs: Any) -> Decision:
            raise RuntimeError("store down")

    base = guard()
    app = Desktop([("c1", "send_credit", CREDIT)], "Sorry.", guard=Broken(base.checklist, base.policy_text))
    app.say("A credit.")
    assert app.desk.ran == []
    assert "store down" in app.response("c1")["error"]


def test_an_error_reading_the_events_blocks_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(events: Any) -> Any:
        raise FormatError("event 3: a function call without an id or a name, or from the user")

    monkeypatch.setattr(google_adk, "trajectory", unreadable)
    app = Desktop([("r1", "get_account", {"account_id": "A1"})], [("c1", "send_credit", CREDIT)], "Sorry.")
    app.say("Read my account, then a credit.")
    assert app.desk.ran == []  # not even the read: a call the guard cannot judge never runs
    assert "without an id" in app.response("c1")["error"]


def test_a_halt_ends_the_run_before_the_tool() -> None:
    class Halting(Guard):
        async def acheck(self, *args: Any, **kwargs: Any) -> Decision:
            return Decision.halt("gate", "Stop: this conversation is under review.")

    base = guard()
    app = Desktop([("c1", "send_credit", CREDIT)], guard=Halting(base.checklist, base.policy_text))
    with pytest.raises(RuntimeError) as raised:
        app.say("A credit.")
    assert isinstance(raised.value.__cause__, GuardHalted)
    assert app.desk.ran == []


def test_a_plugin_listed_after_the_guard_that_answers_tool_calls_is_refused_before_the_run() -> None:
    class Rewriter(BasePlugin):
        async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> Any:
            tool_args["amount"] = 5000
            return None

    app = Desktop([("c1", "send_credit", CREDIT)], "Sent.", plugins=[Rewriter(name="rewriter")])
    with pytest.raises(RuntimeError) as raised:
        app.say("A credit.")
    assert isinstance(raised.value.__cause__, ConfigError) and "rewriter" in str(raised.value.__cause__)
    assert app.desk.ran == [] and app.model.requests == []


def test_a_tool_that_raises_counts_as_sent_and_the_next_credit_is_refused() -> None:
    app = Desktop([("c1", "send_credit", CREDIT)], desk=Desk(raises=True))
    with pytest.raises(ConnectionError):
        app.say("A credit, please.")
    app.desk.raises = False
    app.model.turns = [[("c2", "send_credit", CREDIT)], "Sorry."]
    app.say("Did it work? Send it again.")
    assert app.desk.names() == ["send_credit"]  # only the first attempt reached the tool
    assert "not known" in app.response("c2")["error"]
    kinds = [e.kind for e in app.guard.sessions.session_events(app.key()) if e.call_id == "c1"]
    assert kinds == ["call", "judge", "unknown"]


# -- escalation: ADK's tool confirmation, then the guard's approval ----------------------

REFUND_POLICY = "A refund above 500 needs a supervisor's approval.\n"
REFUND_CHECKLIST = f"""
policy: {{name: refunds, version: "{policy_version(REFUND_POLICY)}"}}
tools:
  issue_refund:
    effect: {{transaction_arg: order_id, approval_threshold: 500}}
"""
REFUND = {"order_id": "O1", "amount": 800, "idempotency_key": "refund:O1"}


class Refunds:
    """A refund desk whose large refunds wait for a supervisor in the guard's approval queue."""

    def __init__(self, tmp_path: Path, *turns: Turn) -> None:
        checklist = parse_checklist(REFUND_CHECKLIST)
        self.queue = open_approvals(f"sqlite:///{tmp_path / 'approvals.db'}")
        self.refunds: list[dict[str, Any]] = []

        def issue_refund(order_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
            """Refund an order."""
            self.refunds.append({"order_id": order_id, "amount": amount})
            return {"status": "refunded"}

        guard = Guard(checklist, REFUND_POLICY, gate=HardGate(checklist), allow_unverified=True, approvals=self.queue,
                      principal="user-42", sessions=MemorySessionStore())  # fmt: skip
        self.app = Desktop(*turns, guard=guard, tools=[issue_refund])

    def pending(self) -> str:
        [request] = self.queue.pending()
        return request.id


def test_an_escalation_pauses_on_adk_confirmation_and_the_confirmed_rerun_runs_once_approved(tmp_path: Path) -> None:
    desk = Refunds(tmp_path, [("r1", "issue_refund", REFUND)], "The refund is done.")
    desk.app.say("Refund order O1, 800 USD.")
    assert desk.refunds == [] and desk.app.model.requests and len(desk.app.model.requests) == 1  # paused
    request = desk.app.confirmation_request()
    asked = request.args["toolConfirmation"]
    assert asked["payload"]["approval_id"] == desk.pending() and "approval" in asked["hint"]
    decide(desk.queue, desk.pending(), "approve", "alice", "VIP customer")
    desk.app.say(confirm(request, True))
    assert desk.refunds == [{"order_id": "O1", "amount": 800}]
    assert desk.app.response("r1") == {"status": "refunded"}


def test_a_confirmation_without_the_reviewers_approval_does_not_run_the_call(tmp_path: Path) -> None:
    desk = Refunds(tmp_path, [("r1", "issue_refund", REFUND)], "It still waits for a supervisor.")
    desk.app.say("Refund order O1, 800 USD.")
    desk.app.say(confirm(desk.app.confirmation_request(), True))  # the client says yes; nobody approved
    assert desk.refunds == []
    assert "approval" in desk.app.response("r1")["error"]


def test_a_declined_confirmation_blocks_the_call(tmp_path: Path) -> None:
    desk = Refunds(tmp_path, [("r1", "issue_refund", REFUND)], "Understood, no refund.")
    desk.app.say("Refund order O1, 800 USD.")
    decide(desk.queue, desk.pending(), "approve", "alice", "VIP customer")
    desk.app.say(confirm(desk.app.confirmation_request(), False))
    assert desk.refunds == []
    assert "declined" in desk.app.response("r1")["error"]


# -- the record of the session ----------------------------------------------------------


def test_two_credits_in_one_model_event_take_one_place_and_only_the_first_runs() -> None:
    app = Desktop([("c1", "send_credit", CREDIT), ("c2", "send_credit", CREDIT)], "One credit sent.")
    app.say("Two credits at once.")
    assert app.desk.names() == ["send_credit"]
    assert "credit-once" in app.response("c2")["error"]
    places = {e.call_id: e.place for e in app.guard.sessions.session_events(app.key()) if e.kind == "call"}
    assert places["c1"][0] == places["c2"][0] and (places["c1"][1], places["c2"][1]) == (0, 1)


def test_two_credits_adk_runs_at_once_are_judged_one_after_the_other() -> None:
    """ADK runs the calls of one event concurrently. The first credit fails (slowly); the second is judged once
    that failure is recorded, which does not count, and is sent."""
    sent: list[float] = []
    started: list[float] = []

    async def send_credit(user_id: str, amount: int) -> dict[str, Any]:
        """Send a goodwill credit."""
        started.append(time.monotonic())
        await asyncio.sleep(0.3)
        if len(started) == 1:
            return {"error": "the credit service is down"}
        sent.append(time.monotonic())
        return {"credit": "GC-1"}

    waiting = make_guard(sessions=MemorySessionStore(), session_result_wait_s=5)
    app = Desktop([("c1", "send_credit", CREDIT), ("c2", "send_credit", CREDIT)], "One credit sent.",
                  guard=waiting, tools=[send_credit])  # fmt: skip
    app.say("A credit, please.")
    assert len(started) == 2 and started[1] >= started[0] + 0.3  # the second ran after the first had failed
    assert len(sent) == 1
    assert app.response("c1") == {"error": "the credit service is down"} and app.response("c2") == {"credit": "GC-1"}


def test_a_read_issued_with_a_raise_in_one_event_is_not_the_state_after_it() -> None:
    app = Desktop(
        [("r0", "get_account", {"account_id": "A1"})],
        [("w1", "set_limit", {"account_id": "A1", "limit": 20}), ("r1", "get_account", {"account_id": "A1"})],
        [("w2", "set_limit", {"account_id": "A1", "limit": 15})],
        "Done.",
    )
    app.say("Raise my limit, then set it to 15.")
    assert ("set_limit", {"account_id": "A1", "limit": 15}) not in app.desk.ran
    assert "error" in app.response("w2")


def test_a_credit_the_session_no_longer_holds_still_counts() -> None:
    """Between the turns the session's events are dropped (a store that trims, a rewritten session): the model
    and the events no longer show the first credit; the guard's record of the ADK session does."""
    app = Desktop([("c1", "send_credit", CREDIT)], "Sent.", [("c2", "send_credit", CREDIT)], "Only one.")
    app.say("A credit, please.")
    app.stored().events.clear()
    app.say("Another credit, please.")
    assert app.desk.names() == ["send_credit"]
    sent = [p.function_call for c in app.model.requests[-2].contents for p in c.parts if p.function_call]
    assert [c.id for c in sent] == []  # the model was not shown c1 on the second turn
    assert "credit-once" in app.response("c2")["error"]


def test_the_same_id_each_turn_is_a_new_call_and_the_second_credit_is_still_blocked() -> None:
    app = Desktop([("call_0", "send_credit", CREDIT)], [("call_0", "send_credit", CREDIT)], "Done.")
    app.say("Two credits.")
    assert app.desk.names() == ["send_credit"]
    assert "credit-once" in app.response("call_0")["error"]


def test_sessions_of_two_users_with_one_session_id_keep_two_records() -> None:
    """ADK scopes a session id per user: the record is keyed by app, user and id, so one user's credit is not
    another's."""

    class Stored:
        def __init__(self, user_id: str) -> None:
            self.app_name, self.user_id, self.id = APP, user_id, "s1"

    assert record_key(Stored("alice")) != record_key(Stored("bob"))
    assert record_key(Stored("alice")) == "desk/alice/s1"


def test_a_sub_agent_a_run_transfers_to_shares_the_record() -> None:
    checklist = parse_checklist(CHECKLIST + "  transfer_to_agent: {mutating: false}\n")
    shared = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True,
                   sessions=MemorySessionStore(), session_result_wait_s=0)  # fmt: skip
    desk = Desk()
    helper = LlmAgent(name="helper", model=ScriptedLlm(turns=[[("c2", "send_credit", CREDIT)], "Only one."]),
                      tools=desk.tools(), description="Sends credits.")  # fmt: skip
    app = Desktop(
        [("c1", "send_credit", CREDIT)],
        [("t1", "transfer_to_agent", {"agent_name": "helper"})],
        desk=desk,
        guard=shared,
        sub_agents=[helper],
    )
    app.say("A credit, then ask the helper for another.")
    assert desk.names() == ["send_credit"]
    assert "credit-once" in app.response("c2")["error"]


# -- the dialogue the guard reads -----------------------------------------------------------


def test_the_trajectory_is_one_message_per_event_and_drops_adks_own_pauses(tmp_path: Path) -> None:
    desk = Refunds(tmp_path, [("r1", "issue_refund", REFUND)])
    desk.app.say("Refund order O1, 800 USD.")
    events = desk.app.stored().events
    messages = trajectory(events).messages
    assert [m.role for m in messages] == ["user", "assistant"]  # the pause: neither placeholder nor ADK's request
    assert [c.id for c in messages[1].tool_calls] == ["r1"]
    client_answer = types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(id="r1", name="issue_refund", response={"ok": True}))])  # fmt: skip
    from google.adk.events import Event

    spoofed = trajectory([*events, Event(author="user", content=client_answer)]).messages[-1]
    assert spoofed.role == "tool" and spoofed.is_error  # a result the client wrote is never a fact


def test_parallel_calls_are_one_assistant_message_and_errors_are_failures() -> None:
    app = Desktop([("r1", "get_account", {"account_id": "A1"}), ("c1", "send_credit", {"amount": 5})], "Done.")
    app.say("Read and credit.")
    messages = trajectory(app.stored().events).messages
    [asked] = [m for m in messages if m.tool_calls]
    assert [c.id for c in asked.tool_calls] == ["r1", "c1"]
    answers = {m.tool_call_id: m for m in messages if m.role == "tool"}
    assert json.loads(answers["r1"].content or "") == {"account_id": "A1", "limit": 10} and not answers["r1"].is_error
    assert answers["c1"].is_error  # ADK's own error dict for the missing argument


def test_importing_the_module_loads_no_adk() -> None:
    import subprocess
    import sys

    code = "import sys, policyguard.integrations.google_adk; print('google.adk.plugins' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert run.stdout.strip() == "False", run.stderr
