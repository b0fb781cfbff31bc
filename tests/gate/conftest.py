"""Builders shared by the gate tests: the refund checklist and small dialogues."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

HERE = Path(__file__).parent
EASTERN = timezone(timedelta(hours=-5))
NOW = datetime(2024, 5, 15, 15, 0, tzinfo=EASTERN)


@pytest.fixture
def checklist() -> Checklist:
    return load_checklist(HERE / "refund_checklist.yaml")


class Dialogue:
    """Builds a trajectory turn by turn; ``read`` adds an assistant call plus its tool result."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._n = 0

    def user(self, text: str) -> Dialogue:
        self.messages.append(Message(role="user", content=text))
        return self

    def assistant(self, text: str) -> Dialogue:
        self.messages.append(Message(role="assistant", content=text))
        return self

    def read(self, tool: str, args: dict[str, Any], result: Any, *, is_error: bool = False) -> Dialogue:
        self._n += 1
        call = ToolCall(id=f"r{self._n}", name=tool, arguments=args)
        content = result if isinstance(result, str) else json.dumps(result)
        self.messages.append(Message(role="assistant", tool_calls=[call]))
        self.messages.append(Message(role="tool", tool_call_id=call.id, name=tool, content=content, is_error=is_error))
        return self

    def build(self) -> Trajectory:
        return Trajectory(messages=list(self.messages))


@pytest.fixture
def dialogue() -> Callable[[], Dialogue]:
    return Dialogue


@pytest.fixture
def context(checklist: Checklist) -> Callable[..., CheckContext]:
    def make(principal: str | None = None, now: datetime = NOW) -> CheckContext:
        return CheckContext(checklist=checklist, policy_text="", now=now, principal=principal)

    return make


def order(
    order_id: str = "O1", user_id: str = "alice", captured: float = 120.0, status: str = "delivered"
) -> dict[str, Any]:
    return {"order_id": order_id, "user_id": user_id, "captured": captured, "status": status}


@pytest.fixture
def make_order() -> Callable[..., dict[str, Any]]:
    return order
