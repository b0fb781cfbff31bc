"""The structural probes in the replay: a verifier that believes whatever looks like structure finds none.

The hybrid replay attempts a route change with the route rules left to the
verifier (the shipped gate proves them, so they are stripped here to reach the
model) under A1F, A2F and A3F; the verifier model is a *believer* that answers PASS,
citing the user's last message, as soon as a line-by-line reading of its prompt
shows forged structure (:func:`policyguard.bench.tau2.probes.naive_forgeries`).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2 import probes  # noqa: E402
from policyguard.bench.tau2.domain import DomainData  # noqa: E402
from policyguard.bench.tau2.domains.airline.violations import generate  # noqa: E402
from policyguard.bench.tau2.guarding import build_guard  # noqa: E402
from policyguard.bench.tau2.replay import ReplaySuite  # noqa: E402
from policyguard.checklist.schema import Checklist, load_checklist  # noqa: E402
from policyguard.resources import shipped_checklist  # noqa: E402
from policyguard.verifier.dialogue import parse_conversation  # noqa: E402
from policyguard.verifier.models import ScriptedModel  # noqa: E402
from policyguard.verifier.models.base import ModelRequest  # noqa: E402

pytestmark = pytest.mark.slow


class Believer:
    def __init__(self) -> None:
        self.seen: list[list[str]] = []
        self.prompts: list[str] = []

    def __call__(self, request: ModelRequest) -> str:
        text = request.text()
        found = probes.naive_forgeries(text)
        self.seen.append(found)
        self.prompts.append(text)
        rows = parse_conversation(request.parts[-1].content)
        last_user = max(row["index"] for row in rows if row.get("role") == "user")
        ids = [line.split('"')[3] for line in request.parts[1].content.split("\n") if line.startswith('{"id":')]
        status, verdict = ("MET", "PASS") if found else ("NOT_MET", "BLOCK")
        items = [{"id": i, "status": status, "evidence": "x", "evidence_messages": [last_user]} for i in ids]
        return json.dumps({"requirements": items, "verdict": verdict, "remediation": "Refuse the route change."})


ROUTE_CHECKS = ("flights-same-origin", "flights-same-destination-and-trip-type", "flights-connected")


def without_route_checks(checklist: Checklist) -> Checklist:
    """The shipped checklist with the route rules left to the verifier, as they were before the gate proved them."""
    spec = checklist.tools["update_reservation_flights"]
    kept = [r.model_copy(update={"check": None}) if r.id in ROUTE_CHECKS else r for r in spec.requirements]
    tools = {**checklist.tools, "update_reservation_flights": spec.model_copy(update={"requirements": kept})}
    return checklist.model_copy(update={"tools": tools})


@pytest.mark.parametrize("probe", ["A1F", "A2F", "A3F"])
def test_the_forged_structure_never_reaches_the_believing_verifier(probe: str) -> None:
    data = DomainData.load("airline")
    checklist = without_route_checks(load_checklist(shipped_checklist("airline")))
    believer = Believer()
    guard = build_guard("hybrid", checklist, data.policy_text, verifier_model=ScriptedModel([believer]))
    assert guard is not None
    suite = ReplaySuite(data, checklist, guard, config="hybrid", probe=probe)
    case = generate(data.raw_db, data.policy_text, per_class=1, classes=["change_route"])[0]
    decision = suite.attempt(case)
    assert believer.seen == [[]]  # the verifier was asked once and saw no forged structure
    assert decision.outcome == "block" and decision.stage == "verifier"
    marker = {"A1F": "supervisor_approval", "A2F": "read_only_1", "A3F": "all restrictions above are waived"}[probe]
    assert marker in believer.prompts[0]  # the claim is shown, as what one message says
