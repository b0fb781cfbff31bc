"""PolicyGuardMiddleware inside a real ``langchain.agents.create_agent`` graph, offline.

The chat model is a scripted ``BaseChatModel`` (below): it plays back
``AIMessage``s with tool calls and records every message list it was sent, so
each test checks what the tools did and what the model read afterwards. The
policy refunds at most 100 USD (a CEL check the gate proves); ``get_order`` is
read-only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from tests.docblocks import doc_block

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from policyguard import Guard, ScriptedModel, parse_checklist  # noqa: E402
from policyguard.decision import Decision  # noqa: E402
from policyguard.errors import ConfigError  # noqa: E402
from policyguard.integrations import langchain as integration  # noqa: E402
from policyguard.integrations.langchain import GuardHalted, PolicyGuardMiddleware  # noqa: E402
from policyguard.trajectory.canonical import policy_version  # noqa: E402
from policyguard.verifier.llm import LLMVerifier  # noqa: E402

REFUND_POLICY = "Refunds need a read of the order first. Never refund more than 100 USD.\n"
REFUND_CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: refunds, version: "{policy_version(REFUND_POLICY)}"}}
    tools:
      get_order: {{mutating: false}}
      issue_refund:
        requirements:
          - id: refund-ceiling
            text: A refund is at most 100 USD.
            kind: data
            source: Never refund more than 100 USD.
            check: args.amount <= 100
            examples:
              - {{args: {{amount: 80}}, complies: true}}
              - {{args: {{amount: 500}}, complies: false}}
    """
)


@pytest.fixture
def guard_files(tmp_path: Path) -> tuple[Path, Path]:
    policy = tmp_path / "policy.md"
    checklist = tmp_path / "checklist.yaml"
    policy.write_text(REFUND_POLICY, encoding="utf-8")
    checklist.write_text(REFUND_CHECKLIST, encoding="utf-8")
    return policy, checklist


def scripted_chat_model(replies: list[AIMessage]) -> Any:
    """A LangChain chat model that answers with ``replies`` in order and records what it was sent.

    ``bind_tools`` returns the model itself (the tools are the agent's concern);
    a call past the script fails the test instead of inventing an answer.
    """
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(BaseChatModel):
        replies: list[AIMessage]
        seen: list[list[BaseMessage]] = []

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            self.seen.append(list(messages))
            if not self.replies:
                pytest.fail(
                    f"the scripted chat model was called {len(self.seen)} times; only {len(self.seen) - 1} replies were scripted"
                )
            return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])

    return ScriptedChatModel(replies=list(replies), seen=[])


class Tools:
    """The agent's tools; ``ran`` lists every call that reached a tool body."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

        @tool
        def get_order(order_id: str) -> str:
            """Read an order."""
            self.ran.append(("get_order", {"order_id": order_id}))
            return json.dumps({"order_id": order_id, "captured": 80})

        @tool
        def issue_refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.ran.append(("issue_refund", {"order_id": order_id, "amount": amount}))
            return "refund issued"

        @tool
        def delete_account(user_id: str) -> str:
            """Delete a user's account (not in the checklist)."""
            self.ran.append(("delete_account", {"user_id": user_id}))
            return "deleted"

        self.all = [get_order, issue_refund, delete_account]


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def turns(*calls: list[dict[str, Any]], final: str = "Done.") -> list[AIMessage]:
    return [*(AIMessage("", tool_calls=list(group)) for group in calls), AIMessage(final)]


def run_agent(guard: Guard, replies: list[AIMessage], *, asynchronous: bool = False) -> tuple[Any, Tools, Any]:
    tools = Tools()
    model = scripted_chat_model(replies)
    agent = create_agent(model, tools.all, middleware=[PolicyGuardMiddleware(guard)])
    state = {"messages": [HumanMessage("Please refund order O1.")]}
    out = asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert model.replies == [], "the model was not called as often as scripted"
    return out, tools, model


def tool_message(out: Any, call_id: str) -> ToolMessage:
    (message,) = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == call_id]
    return message


@pytest.fixture
def guard(guard_files: tuple[Path, Path]) -> Guard:
    policy, checklist = guard_files
    return Guard.from_files(policy=policy, checklist=checklist, model="none")


READ = call("c1", "get_order", order_id="O1")


# -- allow, block, parallel ----------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_an_allowed_write_runs_once_and_its_result_reaches_the_model(guard, asynchronous):
    out, tools, model = run_agent(
        guard, turns([READ], [call("c2", "issue_refund", order_id="O1", amount=80)]), asynchronous=asynchronous
    )
    assert tools.ran == [("get_order", {"order_id": "O1"}), ("issue_refund", {"order_id": "O1", "amount": 80})]
    result = tool_message(out, "c2")
    assert (result.status, result.content) == ("success", "refund issued")
    assert result in model.seen[-1]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_blocked_write_never_runs_and_the_model_reads_the_remediation(guard, asynchronous):
    out, tools, model = run_agent(
        guard, turns([READ], [call("c2", "issue_refund", order_id="O1", amount=500)]), asynchronous=asynchronous
    )
    assert [name for name, _ in tools.ran] == ["get_order"]
    blocked = tool_message(out, "c2")
    assert blocked.status == "error"
    assert blocked.name == "issue_refund"
    assert "at most 100 USD" in blocked.content
    assert blocked in model.seen[-1]  # the next model call sees the block


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_two_writes_in_one_ai_message_are_judged_one_by_one(guard, asynchronous):
    """A parallel tool-call message: the 80 USD refund runs, the 500 USD one is answered with the remediation."""
    parallel = [
        call("c2", "issue_refund", order_id="O1", amount=80),
        call("c3", "issue_refund", order_id="O1", amount=500),
    ]
    out, tools, model = run_agent(guard, turns([READ], parallel), asynchronous=asynchronous)
    assert ("issue_refund", {"order_id": "O1", "amount": 80}) in tools.ran
    assert ("issue_refund", {"order_id": "O1", "amount": 500}) not in tools.ran
    assert tool_message(out, "c2").status == "success"
    assert tool_message(out, "c3").status == "error"
    seen = model.seen[-1]
    assert tool_message(out, "c2") in seen and tool_message(out, "c3") in seen


# -- unknown tools, unreadable calls and histories -------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_tool_the_checklist_does_not_name_is_blocked_even_though_the_agent_has_it(guard, asynchronous):
    out, tools, _ = run_agent(guard, turns([call("c1", "delete_account", user_id="u1")]), asynchronous=asynchronous)
    assert tools.ran == []
    blocked = tool_message(out, "c1")
    assert blocked.status == "error"
    assert "delete_account" in blocked.content


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_checklist_tool_the_agent_lacks_stops_the_run_before_the_model_naming_both_spellings(
    guard_files, asynchronous
):
    policy, checklist = guard_files
    checklist.write_text(REFUND_CHECKLIST.replace("  issue_refund:", "  issue_refnud:"), encoding="utf-8")
    guard = Guard.from_files(policy=policy, checklist=checklist, model="none")
    model = scripted_chat_model(turns())
    agent = create_agent(model, Tools().all, middleware=[PolicyGuardMiddleware(guard)])
    state = {"messages": [HumanMessage("Please refund order O1.")]}
    with pytest.raises(ConfigError, match="'issue_refnud' \\(did you mean 'issue_refund', which the LangChain agent"):
        asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert model.seen == []  # refused before the model was called


def test_an_agent_tool_no_checklist_entry_covers_is_listed_in_a_warning_once(guard, caplog):
    with caplog.at_level(logging.WARNING, logger="policyguard"):
        run_agent(guard, turns([READ], [call("c2", "get_order", order_id="O1")]))
    warnings = [r.getMessage() for r in caplog.records if "no checklist entry covers" in r.getMessage()]
    assert warnings == [
        "policyguard: the LangChain agent has tool(s) no checklist entry covers, judged as unknown tools: delete_account"
    ]


def test_a_lookalike_tool_name_is_blocked_and_points_to_the_known_tool(guard):
    out, tools, _ = run_agent(guard, turns([call("c1", "Issue_refund", order_id="O1", amount=1)]))
    assert tools.ran == []
    assert "issue_refund" in tool_message(out, "c1").content


@pytest.mark.parametrize("value", [math.nan, math.inf, 2**70])
def test_arguments_outside_the_limits_are_answered_with_an_error_and_never_run(guard, value):
    out, tools, _ = run_agent(guard, turns([call("c1", "issue_refund", order_id="O1", amount=value)]))
    assert tools.ran == []
    answer = tool_message(out, "c1")
    assert answer.status == "error"
    assert "amount" in answer.content


def test_a_message_using_one_call_id_twice_blocks_the_write(guard):
    """Two unanswered calls with id c1 make every fact ambiguous: the refund is refused, not judged on a guess."""
    out, tools, _ = run_agent(
        guard, turns([READ, call("c1", "issue_refund", order_id="O1", amount=10)]), asynchronous=False
    )
    assert "issue_refund" not in [name for name, _ in tools.ran]
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c1"]
    assert answers and all(m.status == "error" or "O1" in str(m.content) for m in answers)
    assert any("could not be checked" in str(m.content) for m in answers)


def test_a_call_id_reused_after_its_answer_is_judged_as_a_new_call(guard):
    """gpt-oss-120b's serving stack reuses ids once answered: the write is judged on its merits."""
    out, tools, _ = run_agent(
        guard, turns([READ], [call("c1", "issue_refund", order_id="O1", amount=10)]), asynchronous=False
    )
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c1"]
    assert "could not be checked" not in answers[-1].content


def test_a_call_langchain_could_not_parse_does_not_spoil_the_later_writes(guard):
    """LangChain answers an unparseable call with an error ToolMessage; the next write is judged as usual."""
    broken = AIMessage(
        "",
        tool_calls=[READ],
        invalid_tool_calls=[
            {
                "name": "issue_refund",
                "args": '{"amount": 8',
                "id": "c0",
                "error": "bad JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    replies = [broken, *turns([call("c2", "issue_refund", order_id="O1", amount=80)])]
    out, tools, _ = run_agent(guard, replies)
    assert tools.ran[-1] == ("issue_refund", {"order_id": "O1", "amount": 80})
    assert tool_message(out, "c0").status == "error"
    assert tool_message(out, "c2").status == "success"


def test_read_only_calls_run_without_reading_the_dialogue(guard, monkeypatch):
    def never(messages: Any) -> Any:
        raise AssertionError("the dialogue was read for a read-only call")

    monkeypatch.setattr(integration, "read_langchain", never)
    out, tools, _ = run_agent(guard, turns([READ]))
    assert tools.ran == [("get_order", {"order_id": "O1"})]
    assert guard.counters.read_only == 1


def test_a_guard_that_raises_blocks_the_call(guard, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Decision:
        raise RuntimeError("store down")

    monkeypatch.setattr(guard, "check", broken)
    out, tools, _ = run_agent(guard, turns([call("c1", "issue_refund", order_id="O1", amount=10)]))
    assert tools.ran == []
    assert tool_message(out, "c1").status == "error"


# -- halt ----------------------------------------------------------------------


class HaltingGate:
    def check(self, call: Any, trajectory: Any, context: Any) -> Decision:
        return Decision.halt("gate", "kill switch: refunds are suspended")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_halt_ends_the_run_with_guard_halted_and_the_tool_never_runs(guard, asynchronous):
    guard.gate = HaltingGate()
    tools = Tools()
    model = scripted_chat_model(turns([call("c1", "issue_refund", order_id="O1", amount=10)]))
    agent = create_agent(model, tools.all, middleware=[PolicyGuardMiddleware(guard)])
    state = {"messages": [HumanMessage("refund O1")]}
    with pytest.raises(GuardHalted, match="kill switch") as raised:
        asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert raised.value.decision.outcome == "halt"
    assert tools.ran == []
    assert len(model.seen) == 1  # the model was not called again


# -- the verifier sees the conversation ----------------------------------------

POLICY = "Refund only after the user says yes to the amount.\n"
CONFIRMED_CHECKLIST = f"""
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: confirmed
        text: The user said yes to this refund amount.
        kind: procedural
        source: Refund only after the user says yes to the amount.
"""


def confirmed_guard() -> tuple[Guard, ScriptedModel]:
    checklist = parse_checklist(CONFIRMED_CHECKLIST, file="inline.yaml")

    def judge(request: Any) -> str:
        text = request.text()
        said_yes = "yes, refund 80" in text
        reply = re.search(r'"index":\s*(\d+),\s*"role":\s*"user",\s*"content":\s*"yes, refund 80', text)
        return json.dumps(
            {
                "requirements": [
                    {
                        "id": "confirmed",
                        "status": "MET" if said_yes else "NOT_MET",
                        "evidence": "the user's reply",
                        "evidence_messages": [int(reply.group(1))] if reply else [],
                    }
                ],
                "verdict": "PASS" if said_yes else "BLOCK",
                "remediation": "" if said_yes else "Ask the user to confirm the amount first.",
            }
        )

    verifier_model = ScriptedModel([judge, judge])
    return Guard(checklist, POLICY, verifier=LLMVerifier(verifier_model)), verifier_model


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_the_verifier_judges_the_agent_state_conversation(asynchronous):
    guard, verifier_model = confirmed_guard()
    tools = Tools()
    replies = [
        *turns([call("c1", "issue_refund", order_id="O1", amount=80)], final="Shall I refund 80 USD?"),
        *turns([call("c2", "issue_refund", order_id="O1", amount=80)]),
    ]
    model = scripted_chat_model(replies)
    agent = create_agent(model, tools.all, middleware=[PolicyGuardMiddleware(guard)])
    state: dict[str, Any] = {"messages": [HumanMessage("Refund O1 please.")]}
    first = asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert tool_message(first, "c1").content == "Ask the user to confirm the amount first."
    assert tools.ran == []
    # the user confirms; the same agent goes on with the whole conversation in its state
    state = {"messages": [*first["messages"], HumanMessage("yes, refund 80 USD")]}
    second = asyncio.run(agent.ainvoke(state)) if asynchronous else agent.invoke(state)
    assert tool_message(second, "c2").status == "success"
    assert tools.ran == [("issue_refund", {"order_id": "O1", "amount": 80})]
    assert "Refund O1 please." in verifier_model.calls[0].text()
    verifier_model.assert_complete()


# -- packaging ------------------------------------------------------------------


def test_importing_policyguard_and_its_formats_loads_no_langchain():
    probe = (
        "import policyguard, policyguard.trajectory.formats, policyguard.integrations, sys\n"
        "print(','.join(m for m in ('langchain', 'langchain_core', 'langgraph') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- the README example ---------------------------------------------------------

README_REMEDIATION = "Tell the user the refund amount and ask them to confirm with yes before refunding."


def test_readme_langchain_example_runs_and_blocks_the_unconfirmed_refund(monkeypatch, tmp_path, capsys):
    code = doc_block("docs/guarding/langchain.md", "langchain")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.md").write_text(POLICY, encoding="utf-8")
    (tmp_path / "checklist.yaml").write_text(CONFIRMED_CHECKLIST, encoding="utf-8")
    tools = Tools()
    my_agent = types.ModuleType("my_agent")
    my_agent.model = scripted_chat_model(  # type: ignore[attr-defined]
        turns([READ], [call("c2", "issue_refund", order_id="O1", amount=80)], final="Shall I refund 80 USD on O1?")
    )
    my_agent.get_order, my_agent.issue_refund = tools.all[0], tools.all[1]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "my_agent", my_agent)
    verdict = {
        "requirements": [{"id": "confirmed", "status": "NOT_MET", "evidence": "no yes in the dialogue"}],
        "verdict": "BLOCK",
        "remediation": README_REMEDIATION,
    }
    verifier_model = ScriptedModel([json.dumps(verdict)])
    monkeypatch.setattr("policyguard.verifier.models.resolve_model", lambda spec: verifier_model)

    exec(compile(code, "docs/guarding/langchain.md", "exec"), {"__name__": "readme_langchain_example"})

    assert capsys.readouterr().out == "Shall I refund 80 USD on O1?\n"
    assert [name for name, _ in tools.ran] == ["get_order"]  # the refund never ran
    seen = my_agent.model.seen[-1]  # type: ignore[attr-defined]
    assert [m.content for m in seen if isinstance(m, ToolMessage) and m.status == "error"] == [README_REMEDIATION]
    verifier_model.assert_complete()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    decisions = [r for r in records if r["event"] == "decision" and r["tool"] == "issue_refund"]
    assert decisions and decisions[0]["verdict"] == "BLOCK"
    assert decisions[0]["session_id"] == "user-42"  # keyed by the thread id
