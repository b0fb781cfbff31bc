"""Fixtures for the checklist-generation tests: a refund-desk policy, three tools, a scripted model.

The model is a :class:`ScriptedModel` whose every step is :class:`RefundDesk`,
a function of the request: it answers by the request's ``purpose`` and, for
the requirements step, by the tool named in the prompt, so the tests do not
depend on the order the pipeline visits tools. A test injects a fault by
replacing one answer.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyguard.authoring.checkgen.cli import add_generate_parser
from policyguard.verifier.models import ModelRequest, ScriptedModel

HERE = Path(__file__).resolve().parent
POLICY = HERE / "refund_desk.md"
TOOLS = HERE / "tools.json"

Answer = Any  # a dict (sent as JSON), a raw string, a callable of the request, or a list of these (one per call)

ORDER_FACT = {"tool": "get_order", "match": {"order_id": "args.order_id"}, "description": "the order in the call"}
DELIVERED = {"status": "delivered", "paid": 80, "customer_id": "c1"}


def requirement(rid: str, source: str, check: str | None = None, **extra: Any) -> dict[str, Any]:
    req: dict[str, Any] = {
        "id": rid,
        "text": extra.pop("text", f"Requirement {rid}."),
        "kind": "data" if check else "procedural",
        "source": source,
        "prerequisites": extra.pop("prerequisites", ["get_order"] if check else []),
        "check": check,
        "examples": extra.pop("examples", []),
    }
    req.update(extra)
    return req


def refund_requirements() -> dict[str, Any]:
    """In checklist form (facts as a map, example args as objects), which the parser also accepts."""
    return {
        "requirements": [
            requirement(
                "issue_refund.delivered",
                "A refund may only be issued for an order that has been delivered.",
                "facts.order.status == 'delivered'",
                examples=[
                    {"args": {"order_id": "O1", "amount": 10}, "facts": {"order": DELIVERED}, "complies": True},
                    {
                        "args": {"order_id": "O1", "amount": 10},
                        "facts": {"order": {**DELIVERED, "status": "shipped"}},
                        "complies": False,
                    },
                ],
            ),
            requirement(
                "issue_refund.amount_cap",
                "The refund amount must not exceed the amount paid for the order.",
                "args.amount <= facts.order.paid",
                examples=[
                    {"args": {"order_id": "O1", "amount": 80}, "facts": {"order": DELIVERED}, "complies": True},
                    {"args": {"order_id": "O1", "amount": 81}, "facts": {"order": DELIVERED}, "complies": False},
                ],
            ),
        ],
        "facts": {"order": ORDER_FACT},
    }


def email_requirements() -> dict[str, Any]:
    """In the wire form a strict-schema model answers in: facts as a list, example args/facts as JSON text."""
    email = requirement(
        "send_email.own_order",
        "You may email a customer only about their own order.",
        "facts.order.customer_id == principal",
    )
    email["examples"] = [
        {
            "args_json": json.dumps({"order_id": "O1", "body": "hi"}),
            "facts_json": json.dumps({"order": DELIVERED}),
            "principal": principal,
            "complies": principal == "c1",
            "note": None,
        }
        for principal in ("c1", "c2")
    ]
    wire_fact = {
        "name": "order",
        "tool": "get_order",
        "match": [{"param": "order_id", "expression": "args.order_id"}],
        "description": "the order in the call",
    }
    return {"requirements": [email], "facts": [wire_fact]}


LARGE_TO_HUMAN = requirement(
    "issue_refund.large_to_human",
    "Refunds above 500 dollars must be transferred to a human agent.",
    "args.amount <= 500",
    prerequisites=[],
    examples=[
        {"args": {"order_id": "O1", "amount": 500}, "complies": True},
        {"args": {"order_id": "O1", "amount": 501}, "complies": False},
    ],
)


def draft_of(request: ModelRequest) -> dict[str, Any]:
    """The draft checklist the review prompt shows."""
    text = request.text()
    match = re.search(r"<draft_checklist>\n(.*?)\n</draft_checklist>", text, re.S)
    assert match, "the review prompt shows the draft checklist"
    data = yaml.safe_load(match.group(1))
    assert isinstance(data, dict)
    return data


def review_adding_large_refund_rule(request: ModelRequest) -> dict[str, Any]:
    """A reviewer that finds one omission (the 500-dollar rule) and keeps everything else."""
    draft = draft_of(request)
    tools = copy.deepcopy(draft["tools"])
    tools["issue_refund"] = [*tools["issue_refund"], LARGE_TO_HUMAN]
    return {
        "omissions": [
            {"tool": "issue_refund", "requirement_id": None, "note": "Refunds above 500 dollars need a human agent."}
        ],
        "over_specifications": [],
        "tools": tools,
        "general_rules": draft["general_rules"],
        "facts": draft["facts"],
    }


class RefundDesk:
    """The scripted model's answers for the refund-desk fixture, by step."""

    def __init__(self) -> None:
        self.classify: Answer = {"tools": [{"name": "send_email", "mutating": True, "reason": "It sends mail."}]}
        self.requirements: dict[str, Answer] = {
            "issue_refund": refund_requirements(),
            "send_email": email_requirements(),
        }
        self.general: Answer = {
            "general_rules": [
                requirement(
                    "general.confirmed",
                    "you must list the action details and obtain explicit user confirmation (yes) to proceed",
                    text="List the action details and get an explicit yes before acting.",
                )
            ],
            "facts": {},
            "clock": "2024-05-15T15:00:00-05:00",
            "principal": None,
        }
        self.review: Answer = review_adding_large_refund_rule

    requirement = staticmethod(requirement)

    def __call__(self, request: ModelRequest) -> str:
        if request.purpose == "requirements":
            match = re.search(r"^Tool: (\S+)$", request.text(), re.M)
            assert match, "the requirements prompt names its tool"
            return self._answer(self.requirements, match.group(1), request)
        return self._answer(self.__dict__, request.purpose, request)

    def _answer(self, table: dict[str, Answer], key: str, request: ModelRequest) -> str:
        answer = table[key]
        if isinstance(answer, list):
            answer = answer.pop(0)
        if callable(answer):
            answer = answer(request)
        return answer if isinstance(answer, str) else json.dumps(answer)

    def model(self, steps: int = 5, name: str = "test-model") -> ScriptedModel:
        """A ScriptedModel with ``steps`` calls, each answered by this desk (5 = a full run)."""
        return ScriptedModel([self] * steps, name=name)


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def desk() -> RefundDesk:
    return RefundDesk()


@pytest.fixture
def generate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run ``policyguard checklist generate`` on the fixture with a given model object."""

    def run(model: ScriptedModel, *extra: str, output: Path | None = None, tools: str = str(TOOLS)) -> Run:
        monkeypatch.setattr("policyguard.verifier.models.resolve_model", lambda spec: model)
        parser = argparse.ArgumentParser(prog="policyguard checklist")
        add_generate_parser(parser.add_subparsers(dest="sub", required=True))
        out = output or tmp_path / "refunds.yaml"
        args = parser.parse_args(
            ["generate", "--policy", str(POLICY), "--tools", tools, "--model", "test", "-o", str(out), *extra]
        )
        code = args.func(args)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run
