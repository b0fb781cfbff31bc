"""tau2 telecom in the bench (issue 37): the offline replay with the shipped checklist, and the user's device tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.domain import DomainData, available_domains, installed_domains, to_policyguard  # noqa: E402
from policyguard.bench.tau2.domains.telecom.violations import CLASSES  # noqa: E402
from policyguard.bench.tau2.guarding import build_guard  # noqa: E402
from policyguard.bench.tau2.replay import ReplayReport, ReplaySuite  # noqa: E402
from policyguard.bench.tau2.transcript import Transcript  # noqa: E402
from policyguard.checklist.schema import load_checklist  # noqa: E402
from policyguard.cli import main  # noqa: E402
from policyguard.errors import ConfigError  # noqa: E402
from policyguard.resources import shipped_checklist  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data() -> DomainData:
    return DomainData.load("telecom")


@pytest.fixture(scope="module")
def report(data: DomainData) -> ReplayReport:
    checklist = load_checklist(shipped_checklist("telecom"))
    guard = build_guard("gate_only", checklist, data.policy_text)
    assert guard is not None
    return ReplaySuite(data, checklist, guard, config="gate_only").run(per_class=12, evaluate_tasks=[])


def test_every_installed_domain_with_a_checklist_is_a_bench_domain() -> None:
    assert {"airline", "retail", "telecom"} <= set(installed_domains())
    assert "mock" not in installed_domains()
    assert available_domains() == ["airline", "retail", "telecom"]
    with pytest.raises(ConfigError, match="expected one of airline, retail, telecom"):
        DomainData.load("mock")


def test_the_telecom_data_loads_from_its_own_files(data: DomainData) -> None:
    assert data.policy_text.startswith("# Telecom Agent Policy")  # main_policy.md, not policy.md
    assert {c["customer_id"] for c in data.raw_db["customers"]} == {"C1001", "C1002", "C1003", "C1004"}  # db.toml
    assert data.write_tools == {"suspend_line", "resume_line", "send_payment_request", "refuel_data",
                                "enable_roaming", "disable_roaming"}  # fmt: skip
    assert {"toggle_airplane_mode", "make_payment", "reset_apn_settings"} <= data.user_tools
    assert not data.user_tools & data.write_tools


def test_every_gold_write_passes(report: ReplayReport) -> None:
    assert report.tasks == 2285
    assert report.gold_false_blocks == 0 and report.gold_blocked_calls == []
    assert report.gold_total == report.gold_passed == 2256
    assert report.contradicting_gold == []


def test_every_gate_rule_blocks_its_injected_violations(report: ReplayReport) -> None:
    assert set(report.by_class) == set(CLASSES)
    assert report.misses == [] and report.violations_blocked == report.violations_total == 68
    checklist = load_checklist(shipped_checklist("telecom"))
    gate_rules = {r.id for spec in checklist.tools.values() for r in spec.requirements if r.check}
    assert len(gate_rules) == 12
    caught = {rid for tally in report.by_class.values() for rid in tally.blocked_by}
    assert gate_rules <= caught
    # Each rule's own class isolates it: the state is set up so that only that rule fails.
    assert report.by_class["resume_contract_ended"].blocked_by == {"resume-contract-not-ended": 2}
    assert report.by_class["second_awaiting_payment"].blocked_by == {"pay-one-awaiting": 5}
    assert report.by_class["refuel_over_cap"].blocked_by == {"refuel-cap": 12}


def test_the_users_device_calls_are_the_users_never_facts(data: DomainData) -> None:
    """A user's own tool call and its answer become user messages: no tool call of the agent, no tool result."""
    task = data.task("[service_issue]overdue_bill_suspension[PERSONA:Easy]")
    transcript = Transcript(data.task_env(task), prefix="x")
    transcript.call("get_customer_by_phone", {"phone_number": "555-123-2002"})
    transcript.call("send_payment_request", {"customer_id": "C1001", "bill_id": "B1234321"}, write=True)
    answer = transcript.user_call("make_payment", {})
    assert not answer.error
    trajectory = to_policyguard(transcript.messages)
    assert [m.role for m in trajectory.messages] == ["assistant", "tool", "assistant", "tool", "user", "user"]
    assert trajectory.messages[4].content == "[on my device] make_payment({})"
    assert str(trajectory.messages[5].content).startswith("[my device answered] ")
    assert [r.call.name for r in trajectory.tool_results()] == ["get_customer_by_phone", "send_payment_request"]
    bill: Any = json.loads(transcript.call("get_details_by_id", {"id": "B1234321"}).content)
    assert bill["status"] == "Paid"  # the user's payment reached the agent's database, as in tau2


def test_bench_replay_takes_telecom_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "replay", "--domain", "telecom", "--per-class", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["domain"] == "telecom" and out["evaluator_checks"] == []
    assert out["verdict"]["as_expected"] is True


def test_an_unknown_domain_is_refused_naming_the_domains(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "replay", "--domain", "banking"]) == 2
    err = capsys.readouterr().err
    assert "unknown tau2 domain 'banking'; expected one of airline, retail, telecom" in err


def _telecom_results(data: DomainData, tmp_path: Any, *, extra_refuel: float | None) -> Any:
    """A tau2 results file holding one telecom simulation: the gold of the overdue-bill task, played for real
    (the user pays on their device between the agent's writes), plus, if asked, a refuel above the cap."""
    from tau2.data_model.simulation import Results, SimulationRun

    task = data.task("[service_issue]overdue_bill_suspension[PERSONA:Easy]")
    transcript = Transcript(data.task_env(task), prefix="s")
    transcript.user("My phone has no service. I am John Smith, 555-123-2002.")
    transcript.call("get_customer_by_phone", {"phone_number": "555-123-2002"})
    transcript.call("get_bills_for_customer", {"customer_id": "C1001"})
    transcript.call("get_details_by_id", {"id": "B1234321"})
    transcript.call("send_payment_request", {"customer_id": "C1001", "bill_id": "B1234321"}, write=True)
    transcript.user_call("make_payment", {})
    transcript.call("get_bills_for_customer", {"customer_id": "C1001"})
    transcript.call("get_details_by_id", {"id": "L1002"})
    transcript.call("resume_line", {"customer_id": "C1001", "line_id": "L1002"}, write=True)
    if extra_refuel is not None:
        transcript.call("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": extra_refuel})
    base = json.loads((Path(__file__).parent / "sims_fixtures" / "sonnet45_airline_7sims.json").read_text())
    base["info"]["environment_info"]["domain_name"] = "telecom"
    results = Results.model_validate({**base, "tasks": [], "simulations": []})
    run = SimulationRun(
        id="t1", task_id=task.id, start_time="", end_time="", duration=0.0, termination_reason="user_stop",
        messages=transcript.messages, trial=0, seed=0,
    )  # fmt: skip
    results.tasks = [task]
    results.simulations = [run]
    path = tmp_path / "telecom_results.json"
    path.write_text(results.model_dump_json(), encoding="utf-8")
    return path


def test_bench_sims_judges_a_telecom_run_with_the_users_payment_in_it(
    data: DomainData, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _telecom_results(data, tmp_path, extra_refuel=3.0)
    code = main(["bench", "sims", str(path), "--domain", "telecom", "--json"])
    out = json.loads(capsys.readouterr().out)
    rows = [(c["tool"], c["outcome"]) for c in out["calls"]]
    # The payment request and the resumption (after the user paid on their device) pass; 3 GB is blocked.
    assert rows == [("send_payment_request", "allow"), ("resume_line", "allow"), ("refuel_data", "block")], out
    assert code == 0
    assert out["by_requirement"] == {"refuel-cap": 1}


@pytest.mark.parametrize(("bill", "outcome"), [("B1005", "allow"), ("B1004", "block")])
def test_the_guard_reads_the_bill_itself_when_the_agent_did_not(data: DomainData, bill: str, outcome: str) -> None:
    """Fetched facts on telecom: only the customer was looked up; the guard reads the bill and the bills through
    the environment's read tools and decides on them (B1005 is overdue, B1004 paid)."""
    from policyguard.bench.tau2.replay import _EnvReads
    from policyguard.bench.tau2.transcript import as_call

    checklist = load_checklist(shipped_checklist("telecom"))
    guard = build_guard("gate_only", checklist, data.policy_text)
    assert guard is not None
    transcript = Transcript(data.fresh_env(), prefix="f")
    transcript.user("I want to pay my overdue bill. My number is 555-123-1002.")
    transcript.call("get_customer_by_phone", {"phone_number": "555-123-1002"})
    pending = transcript.new_call("send_payment_request", {"customer_id": "C1002", "bill_id": bill})
    unfetched = guard.check(as_call(pending), transcript.trajectory())
    assert unfetched.outcome == "block"  # the bill was never read
    decision = guard.check(as_call(pending), transcript.trajectory(), fetch=_EnvReads(transcript.env))  # type: ignore[call-arg]
    assert decision.outcome == outcome
    if outcome == "block":
        assert [r.id for r in decision.requirements if r.status == "NOT_MET"] == ["pay-overdue-only"]
