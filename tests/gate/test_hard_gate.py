"""The hard gate: read-only passes, missing facts and failing checks block, the rest escalates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, FactSource, parse_checklist
from policyguard.errors import ChecklistError
from policyguard.gate.hardgate import HardGate, compile_checklist_checks
from policyguard.stages import CheckContext, Gate
from policyguard.trajectory.messages import ToolCall

Dialogues = Callable[[], Any]  # the Dialogue builder from conftest
Contexts = Callable[..., CheckContext]
Orders = Callable[..., dict[str, Any]]


def refund(amount: float = 50, order_id: str = "O1") -> ToolCall:
    return ToolCall(id="c9", name="issue_refund", arguments={"order_id": order_id, "amount": amount})


def statuses(decision: Any) -> dict[str, tuple[str, str]]:
    return {r.id: (r.status, r.judged_by) for r in decision.requirements}


def test_hard_gate_is_a_gate(checklist: Checklist) -> None:
    assert isinstance(HardGate(checklist), Gate)


def test_read_only_tool_passes_without_checks(checklist: Checklist, dialogue: Dialogues, context: Contexts) -> None:
    call = ToolCall(id="c1", name="get_order", arguments={"order_id": "O1"})
    decision = HardGate(checklist).check(call, dialogue().build(), context())
    assert decision.outcome == "allow" and decision.stage == "read_only"
    assert decision.call_id == "c1" and decision.tool == "get_order"
    assert decision.args_sha256 == call.args_sha256


def test_unknown_tool_is_mutating_and_escalates_with_the_general_rules(
    checklist: Checklist, dialogue: Dialogues, context: Contexts
) -> None:
    call = ToolCall(id="c1", name="delete_account", arguments={})
    decision = HardGate(checklist).check(call, dialogue().build(), context("alice"))
    assert decision.outcome == "escalate" and decision.stage == "gate"
    assert statuses(decision) == {"general.one_at_a_time": ("UNVERIFIED", "none")}


def test_all_checks_hold_then_escalate_for_the_procedural_rest(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order()).build()
    decision = HardGate(checklist).check(refund(50), trajectory, context("alice"))
    assert decision.outcome == "escalate" and decision.stage == "gate"
    assert statuses(decision) == {
        "refund.within_captured": ("MET", "gate"),
        "refund.owner": ("MET", "gate"),
        "refund.ceiling": ("MET", "gate"),
        "refund.confirmed": ("UNVERIFIED", "none"),
        "general.one_at_a_time": ("UNVERIFIED", "none"),
    }
    assert decision.call_id == "c9" and decision.tool == "issue_refund"
    assert decision.args_sha256 == refund(50).args_sha256
    assert decision.resolver_reads == 0


def test_missing_fact_blocks_and_names_the_read(checklist: Checklist, dialogue: Dialogues, context: Contexts) -> None:
    decision = HardGate(checklist).check(refund(), dialogue().build(), context("alice"))
    assert decision.outcome == "block" and decision.stage == "gate"
    assert decision.message == 'Read the order first: call get_order(order_id="O1") before issue_refund.'
    assert statuses(decision)["refund.within_captured"] == ("NOT_MET", "gate")
    assert "missing fact" in (decision.requirements[0].evidence or "")
    # the ceiling needs no fact and still holds
    assert statuses(decision)["refund.ceiling"] == ("MET", "gate")


def test_a_read_of_another_order_does_not_count(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O2"}, make_order("O2", captured=900.0)).build()
    decision = HardGate(checklist).check(refund(order_id="O1"), trajectory, context("alice"))
    assert decision.outcome == "block"
    assert 'get_order(order_id="O1")' in (decision.message or "")


def test_a_total_stated_only_by_the_user_is_missing(
    checklist: Checklist, dialogue: Dialogues, context: Contexts
) -> None:
    trajectory = dialogue().user("My order O1 total is 999, refund 300 please.").build()
    decision = HardGate(checklist).check(refund(300), trajectory, context("alice"))
    assert decision.outcome == "block"
    assert "get_order" in (decision.message or "")


def test_an_error_result_is_not_a_fact(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(), is_error=True).build()
    decision = HardGate(checklist).check(refund(), trajectory, context("alice"))
    assert decision.outcome == "block" and "get_order" in (decision.message or "")


def test_the_newest_read_decides(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = (
        dialogue()
        .read("get_order", {"order_id": "O1"}, make_order(captured=120.0))
        .read("get_order", {"order_id": "O1"}, make_order(captured=30.0))  # partly refunded since
        .build()
    )
    decision = HardGate(checklist).check(refund(50), trajectory, context("alice"))
    assert decision.outcome == "block"
    assert statuses(decision)["refund.within_captured"] == ("NOT_MET", "gate")


def test_failing_check_blocks_naming_the_requirement(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(captured=120.0)).build()
    decision = HardGate(checklist).check(refund(121), trajectory, context("alice"))
    assert decision.outcome == "block" and decision.stage == "gate" and decision.verdict == "BLOCK"
    assert "refund.within_captured" in (decision.message or "")
    assert 'which says "The refund must not exceed the amount captured' in (decision.message or "")
    assert statuses(decision)["refund.within_captured"] == ("NOT_MET", "gate")
    assert statuses(decision)["refund.owner"] == ("MET", "gate")


def test_ceiling_authorizes_50_but_not_501(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(captured=1000.0)).build()
    gate = HardGate(checklist)
    assert gate.check(refund(500), trajectory, context("alice")).outcome == "escalate"
    blocked = gate.check(refund(501), trajectory, context("alice"))
    assert blocked.outcome == "block" and "refund.ceiling" in (blocked.message or "")


def test_deny_wins_when_several_checks_fail(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(user_id="bob", captured=1000.0)).build()
    decision = HardGate(checklist).check(refund(900), trajectory, context("alice"))
    assert decision.outcome == "block"
    assert "refund.owner" in (decision.message or "") and "refund.ceiling" in (decision.message or "")


def test_principal_from_context_is_used_for_ownership(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(user_id="alice")).build()
    gate = HardGate(checklist)
    assert gate.check(refund(), trajectory, context("alice")).outcome == "escalate"
    assert gate.check(refund(), trajectory, context("bob")).outcome == "block"


def test_principal_from_the_user_lookup_result(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = (
        dialogue()
        .read("get_user_details", {"user_id": "alice"}, {"user_id": "alice", "membership": "silver"})
        .read("get_order", {"order_id": "O1"}, make_order(user_id="alice"))
        .build()
    )
    assert HardGate(checklist).check(refund(), trajectory, context(None)).outcome == "escalate"


def test_a_user_claiming_to_be_the_owner_is_not_a_principal(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    trajectory = (
        dialogue()
        .user("I am alice (user_id alice), the owner of O1.")
        .read("get_order", {"order_id": "O1"}, make_order(user_id="alice"))
        .build()
    )
    decision = HardGate(checklist).check(refund(), trajectory, context(None))
    assert decision.outcome == "block"
    assert statuses(decision)["refund.owner"] == ("NOT_MET", "gate")


def test_resolver_wins_and_its_reads_are_recorded(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    class Fresh:
        def resolve(self, fact_name: str, source: FactSource, keys: dict[str, Any]) -> Any | None:
            assert (fact_name, keys) == ("order", {"order_id": "O1"})
            return make_order(captured=10.0)  # refunded elsewhere since the agent read it

    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(captured=120.0)).build()
    decision = HardGate(checklist, resolver=Fresh()).check(refund(50), trajectory, context("alice"))
    assert decision.outcome == "block"
    assert decision.resolver_reads == 1
    assert "refund.within_captured" in (decision.message or "")


def test_prerequisite_read_is_enforced_even_when_the_resolver_has_the_fact(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    class Fresh:
        def resolve(self, fact_name: str, source: FactSource, keys: dict[str, Any]) -> Any | None:
            return make_order()

    decision = HardGate(checklist, resolver=Fresh()).check(refund(50), dialogue().build(), context("alice"))
    assert decision.outcome == "block"
    assert decision.message == 'Read first: call get_order(order_id="O1") before issue_refund.'
    assert decision.resolver_reads == 1


def test_dependent_fact_missing_names_the_first_read(
    checklist: Checklist, dialogue: Dialogues, context: Contexts
) -> None:
    call = ToolCall(id="c2", name="grant_credit", arguments={"order_id": "O1"})
    decision = HardGate(checklist).check(call, dialogue().build(), context("alice"))
    assert decision.outcome == "block"
    assert decision.message == 'Read the user first: call get_order(order_id="O1") before grant_credit.'


def test_dependent_fact_resolves_through_the_order(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    call = ToolCall(id="c2", name="grant_credit", arguments={"order_id": "O1"})
    base = dialogue().read("get_order", {"order_id": "O1"}, make_order(user_id="alice"))
    gold = base.read("get_user_details", {"user_id": "alice"}, {"user_id": "alice", "membership": "gold"}).build()
    assert HardGate(checklist).check(call, gold, context("alice")).outcome == "escalate"


def test_eval_error_blocks_fail_closed(checklist: Checklist, dialogue: Dialogues, context: Contexts) -> None:
    call = ToolCall(id="c3", name="annotate_order", arguments={"order_id": "O1"})  # no "note"
    decision = HardGate(checklist).check(call, dialogue().build(), context("alice"))
    assert decision.outcome == "block" and decision.stage == "gate_error"
    assert "note" in (decision.error or "")
    assert statuses(decision)["note.short"] == ("NOT_MET", "gate")


def test_naive_timestamp_argument_is_read_in_the_policy_timezone(
    checklist: Checklist, dialogue: Dialogues, context: Contexts
) -> None:
    gate = HardGate(checklist)
    # now is 2024-05-15 15:00 at UTC-5; 16:00 naive is an hour later there,
    # though 16:00 UTC would be four hours earlier.
    later = ToolCall(id="c4", name="schedule_pickup", arguments={"at": "2024-05-15T16:00:00"})
    earlier = ToolCall(id="c5", name="schedule_pickup", arguments={"at": "2024-05-15T16:00:00Z"})
    assert gate.check(later, dialogue().build(), context("alice")).outcome == "escalate"
    assert gate.check(earlier, dialogue().build(), context("alice")).outcome == "block"


BAD = """\
schema_version: 1
policy:
  name: bad
  version: "sha256:1111111111111111111111111111111111111111111111111111111111111111"
tools:
  issue_refund:
    requirements:
      - id: ok
        text: fine
        kind: data
        source: s
        check: args.amount <= 500
      - id: broken
        text: broken
        kind: data
        source: s
        check: args.amount <=
general_rules:
  - id: typo
    text: t
    kind: data
    source: s
    check: arg.amount > 0
"""


def test_bad_cel_raises_checklist_error_with_file_and_line() -> None:
    checklist = parse_checklist(BAD, file="bad.yaml")
    with pytest.raises(ChecklistError) as info:
        HardGate(checklist)
    assert info.value.file == "bad.yaml" and info.value.line == 17
    assert "broken" in str(info.value)


def test_compile_checklist_checks_collects_every_problem() -> None:
    problems = compile_checklist_checks(parse_checklist(BAD, file="bad.yaml"))
    assert [(p.line, p.field) for p in problems] == [
        (17, "tools.issue_refund.requirements.1.check"),
        (23, "general_rules.0.check"),
    ]
    assert "unknown variable" in problems[1].message


def test_undeclared_fact_is_a_checklist_problem(checklist: Checklist) -> None:
    text = BAD.replace("check: args.amount <=\n", "check: facts.invoice.total > 0\n").replace(
        "arg.amount", "args.amount"
    )
    problems = compile_checklist_checks(parse_checklist(text, file="bad.yaml"))
    assert len(problems) == 1 and "undeclared fact 'invoice'" in problems[0].message


def test_the_shipped_fixture_has_no_problems(checklist: Checklist) -> None:
    assert compile_checklist_checks(checklist) == []


def test_an_approval_for_another_transaction_is_refused(
    checklist: Checklist, dialogue: Dialogues, context: Contexts
) -> None:
    # seed 003's fourth case: amount 800, "approved", but the approval belongs to another transaction.
    call = ToolCall(
        id="c6", name="issue_approved_refund", arguments={"order_id": "O1", "amount": 800, "approval_id": "A7"}
    )
    gate = HardGate(checklist)
    other = dialogue().read("get_approval", {"approval_id": "A7"}, {"approval_id": "A7", "transaction_id": "O2", "amount": 1000}).build()
    blocked = gate.check(call, other, context("alice"))
    assert blocked.outcome == "block" and "approved.bound_to_order" in (blocked.message or "")
    own = dialogue().read("get_approval", {"approval_id": "A7"}, {"approval_id": "A7", "transaction_id": "O1", "amount": 1000}).build()
    assert gate.check(call, own, context("alice")).outcome == "escalate"


def test_a_fact_keyed_on_the_principal(checklist: Checklist, dialogue: Dialogues, context: Contexts) -> None:
    call = ToolCall(id="c7", name="redeem_points", arguments={"points": 300})
    trajectory = (
        dialogue()
        .read("get_user_details", {"user_id": "bob"}, {"user_id": "bob", "points": 9000})
        .read("get_user_details", {"user_id": "alice"}, {"user_id": "alice", "points": 100})
        .build()
    )
    gate = HardGate(checklist)
    assert gate.check(call, trajectory, context("alice")).outcome == "block"  # alice's record, not bob's
    assert gate.check(call, trajectory, context("bob")).outcome == "escalate"
    unknown = gate.check(call, trajectory, context(None))  # bob was looked up first: he is the principal
    assert unknown.outcome == "escalate"


def test_one_gate_serves_many_threads(
    checklist: Checklist, dialogue: Dialogues, context: Contexts, make_order: Orders
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    gate = HardGate(checklist)
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(captured=120.0)).build()
    amounts = list(range(100, 140))
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda a: gate.check(refund(a), trajectory, context("alice")).outcome, amounts))
    assert outcomes == ["escalate" if a <= 120 else "block" for a in amounts]
