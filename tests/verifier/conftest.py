"""Shared fixtures for the verifier tests: a small policy, its checklist, a dialogue."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pytest

from policyguard import Checklist, Message, ToolCall, Trajectory, parse_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def policy_text() -> str:
    return (HERE / "policy.md").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def checklist(policy_text: str) -> Checklist:
    source = (HERE / "checklist.yaml.j2").read_text(encoding="utf-8")
    text = jinja2.Template(source, undefined=jinja2.StrictUndefined).render(version=policy_version(policy_text))
    return parse_checklist(text, file="checklist.yaml")


@pytest.fixture
def context(checklist: Checklist, policy_text: str) -> CheckContext:
    return CheckContext(
        checklist=checklist, policy_text=policy_text, now=datetime(2024, 5, 15, 15, 0, tzinfo=timezone.utc)
    )


CANCEL = ToolCall(id="call_9", name="cancel_reservation", arguments={"reservation_id": "ZFA04Y"})


@pytest.fixture
def cancel_call() -> ToolCall:
    return CANCEL


@pytest.fixture
def trajectory() -> Trajectory:
    """User asks to cancel; agent reads the reservation; user confirms; agent calls cancel."""
    lookup = ToolCall(id="call_1", name="get_reservation_details", arguments={"reservation_id": "ZFA04Y"})
    return Trajectory(
        messages=[
            Message(role="system", content="You are an airline agent. SYSTEM-PROMPT-MARKER"),
            Message(role="user", content="Please cancel reservation ZFA04Y. USER-TEXT-MARKER"),
            Message(role="assistant", content="Let me look it up.", tool_calls=[lookup]),
            Message(
                role="tool",
                tool_call_id="call_1",
                name="get_reservation_details",
                content=json.dumps({"reservation_id": "ZFA04Y", "cabin": "business", "created_at": "2024-05-14"}),
            ),
            Message(role="assistant", content="Cancel ZFA04Y (business cabin), refund to original payment. Proceed?"),
            Message(role="user", content="yes"),
            Message(role="assistant", content=None, tool_calls=[CANCEL]),
        ]
    )


def verdict_json(statuses: dict[str, str], verdict: str, remediation: str = "", cites: tuple[int, ...] = (3, 5)) -> str:
    """A verifier answer judging each id with the given status, citing ``cites``.

    The default citations hold for the ``trajectory`` fixture: 3 is the
    reservation's tool result, 5 the user's "yes" after the agent listed the details.
    """
    return json.dumps(
        {
            "requirements": [
                {"id": rid, "status": st, "evidence": f"3 and 5 show it ({rid})", "evidence_messages": list(cites)}
                for rid, st in statuses.items()
            ],
            "verdict": verdict,
            "remediation": remediation,
        }
    )


@pytest.fixture
def answer() -> Callable[..., str]:
    return verdict_json
