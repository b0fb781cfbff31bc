"""A check that names a fact the dialogue lacks is judged without it only when no value of it could matter.

The gate blocks a call whose check needs a fact that was never read (or is
stale), asking for the read. A check can name a fact and not need it for this
call: ``args.method == "card" || facts.profile.balance >= 10`` is true for a card
whatever the profile says. CEL evaluates such a disjunction to true even when
the other side is a "no such key" error, so the gate judges it MET without the
profile - and asks for no read that only that fact needs.

What stays refused:

* a check that is not true without the fact (false, or an error) asks for the read, as before;
* a check that can *see* that a fact is absent (``has(facts.NAME)``, ``"NAME" in facts``,
  ``facts`` as a whole) is never judged without it: absence could make it true;
* a prerequisite read that other facts of the check come from is still required;
* a stale fact (changed by a later write) is spared only where the check does not need it.

The property test is the soundness argument: whenever the gate spares a fact,
the check is true for every value hypothesis gives that fact.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import Checklist, parse_checklist
from policyguard.decision import Decision
from policyguard.gate.absent import decidable_without_absent
from policyguard.gate.cel import CelEvalError, compile_check
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

CHECKLIST = """\
policy: {{name: pay, version: "{version}"}}
facts:
  account: {{tool: get_account, match: {{account_id: args.account_id}}}}
  profile: {{tool: get_profile, match: {{user_id: facts.account.user_id}}, invalidated_by: [pay]}}
tools:
  get_account: {{mutating: false}}
  get_profile: {{mutating: false}}
  pay:
    requirements:
      - id: rule
        text: The rule under test.
        kind: data
        source: The rule under test.
        prerequisites: [{prerequisites}]
        check: {check}
"""
NOW = datetime(2024, 5, 15, tzinfo=timezone.utc)
POLICY = "Pay only with a card or enough balance.\n"
ACCOUNT = {"account_id": "A1", "user_id": "u1", "method": "card_1", "card": True}
PROFILE = {"user_id": "u1", "balance": 50, "methods": ["card_1", "gift_1"]}


def gate(check: str, prerequisites: str = "get_account, get_profile") -> tuple[HardGate, Checklist]:
    text = CHECKLIST.format(check=json.dumps(check), prerequisites=prerequisites, version=policy_version(POLICY))
    checklist = parse_checklist(text)
    return HardGate(checklist), checklist


def dialogue(*reads: tuple[str, dict[str, Any], Any], pending: ToolCall) -> Trajectory:
    messages = [Message(role="user", content="please pay")]
    for index, (tool, args, result) in enumerate(reads):
        call = ToolCall(id=f"r{index}", name=tool, arguments=args)
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id=call.id, name=tool, content=json.dumps(result)))
    messages.append(Message(role="assistant", tool_calls=[pending]))
    return Trajectory(messages=messages)


def pay(amount: float = 20, method: str = "card_1") -> ToolCall:
    return ToolCall(id="pending", name="pay", arguments={"account_id": "A1", "amount": amount, "method": method})


def decide(check: str, *reads: tuple[str, dict[str, Any], Any], call: ToolCall | None = None, **kw: Any) -> Decision:
    hard, checklist = gate(check, **kw)
    pending = call or pay()
    context = CheckContext(checklist=checklist, policy_text="", now=NOW, principal="u1")
    return hard.check(pending, dialogue(*reads, pending=pending), context)


READ_ACCOUNT = ("get_account", {"account_id": "A1"}, ACCOUNT)
READ_PROFILE = ("get_profile", {"user_id": "u1"}, PROFILE)
CARD_OR_BALANCE = 'args.method.startsWith("card_") || facts.profile.balance >= args.amount'


def test_a_check_true_whatever_the_missing_fact_holds_is_met_without_reading_it() -> None:
    decision = decide(CARD_OR_BALANCE, READ_ACCOUNT)
    assert decision.outcome != "block", decision.message
    [result] = decision.requirements
    assert result.status == "MET"
    assert "without the profile" in result.evidence


def test_the_same_check_asks_for_the_read_when_the_missing_fact_decides_it() -> None:
    decision = decide(CARD_OR_BALANCE, READ_ACCOUNT, call=pay(method="gift_1"))
    assert decision.outcome == "block"
    assert "Read the profile first" in decision.message
    assert "get_profile" in decision.message


def test_a_check_false_without_the_fact_asks_for_the_read_not_a_violation() -> None:
    decision = decide('args.method == "x" && facts.profile.balance >= 0', READ_ACCOUNT)
    assert decision.outcome == "block"
    assert "Read the profile first" in decision.message


@pytest.mark.parametrize(
    "check",
    [
        "!has(facts.profile) || facts.profile.balance >= args.amount",
        "!has( facts . profile ) || facts.profile.balance >= args.amount",
        '!("profile" in facts) || facts.profile.balance >= args.amount',
        "size(facts) < 3 || facts.profile.balance >= args.amount",
        'facts["profile"].balance >= args.amount || true',
    ],
    ids=["has-whole-fact", "has-spaced", "in-facts", "facts-size", "index"],
)
def test_a_check_that_can_see_a_fact_is_absent_is_never_judged_without_it(check: str) -> None:
    assert not decidable_without_absent(check)
    decision = decide(check, READ_ACCOUNT)
    assert decision.outcome == "block"
    assert decision.requirements[0].status == "NOT_MET"


def test_has_on_a_field_of_the_fact_still_needs_the_fact() -> None:
    assert decidable_without_absent("has(facts.profile.balance) || args.amount < 0")
    decision = decide("!has(facts.profile.balance) || facts.profile.balance >= args.amount", READ_ACCOUNT)
    assert decision.outcome == "block"
    assert "Read the profile first" in decision.message


def test_a_prerequisite_read_other_facts_come_from_is_still_required() -> None:
    # the profile is spared; the account is read by the check and must come from get_account
    decision = decide('facts.account.card || facts.profile.balance >= 0', ("get_profile", {"user_id": "u1"}, PROFILE))
    assert decision.outcome == "block"
    assert "get_account" in decision.message


def test_a_prerequisite_of_an_unrelated_tool_is_still_required() -> None:
    hard, checklist = gate(CARD_OR_BALANCE, prerequisites="get_account, get_profile, get_receipt")
    pending = pay()
    decision = hard.check(pending, dialogue(READ_ACCOUNT, pending=pending), CheckContext(checklist=checklist, policy_text="", now=NOW, principal="u1"))
    assert decision.outcome == "block"
    assert "get_receipt" in decision.message


def test_a_stale_fact_is_spared_only_where_the_check_does_not_need_it() -> None:
    earlier = ("pay", {"account_id": "A1", "amount": 5, "method": "gift_1"}, {"ok": True})
    spent_card = decide(CARD_OR_BALANCE, READ_ACCOUNT, READ_PROFILE, earlier, call=pay(method="card_1"))
    assert spent_card.outcome != "block", spent_card.message
    spent_gift = decide(CARD_OR_BALANCE, READ_ACCOUNT, READ_PROFILE, earlier, call=pay(method="gift_1"))
    assert spent_gift.outcome == "block"
    assert "profile" in spent_gift.message


# --- the soundness property -------------------------------------------------------------------------------

ATOMS = [
    "args.amount > 10",
    "args.amount >= 0",
    "args.amount < 0",
    'args.method.startsWith("card_")',
    "facts.profile.balance >= args.amount",
    "facts.profile.methods.exists(m, m == args.method)",
    "facts.profile.methods.all(m, m != args.method)",
    "has(facts.profile.balance)",
    "facts.profile.balance == null",
    "type(facts.profile) == type({})",
    "facts.profile.methods.size() > 1",
    "[1, 2].exists(i, facts.profile.balance > i)",
    "facts.account.card",
    "!has(facts.profile)",
]


def expressions() -> st.SearchStrategy[str]:
    leaves = st.sampled_from(ATOMS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: f"({p[0]} || {p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"({p[0]} && {p[1]})"),
            inner.map(lambda e: f"!({e})"),
            st.tuples(inner, inner, inner).map(lambda p: f"({p[0]} ? {p[1]} : {p[2]})"),
        )

    checks = st.recursive(leaves, extend, max_leaves=6)
    # a disjunct on the arguments alone is the shape that spares a fact most often
    either = st.tuples(checks, st.sampled_from(ATOMS[:4])).map(lambda p: f"({p[0]}) || {p[1]}")
    return st.one_of(checks, either)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=3))
PROFILE_VALUES = st.one_of(
    JSON_SCALARS,
    st.lists(JSON_SCALARS, max_size=2),
    st.fixed_dictionaries(
        {},
        optional={
            "balance": st.one_of(st.integers(-10, 100), st.none(), st.text(max_size=2)),
            "methods": st.one_of(st.lists(st.sampled_from(["card_1", "gift_1", "x"]), max_size=3), st.integers()),
        },
    ),
)


def _value(source: str, variables: dict[str, Any]) -> Any:
    try:
        return compile_check(source).evaluate(variables)
    except CelEvalError:
        return "error"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    check=expressions(),
    method=st.sampled_from(["card_1", "gift_1"]),
    amount=st.integers(0, 30),
    profiles=st.lists(PROFILE_VALUES, min_size=1, max_size=6),
)
def test_whenever_the_gate_spares_a_fact_the_check_is_true_for_every_value_of_it(
    check: str, method: str, amount: int, profiles: list[Any]
) -> None:
    decision = decide(check, READ_ACCOUNT, call=pay(amount=amount, method=method))
    [result] = decision.requirements
    assume("facts.profile" in check)
    spared = "without the profile" in result.evidence
    event("spared" if spared else f"not spared: {result.status}")
    if not spared:
        return
    args = {"account_id": "A1", "amount": amount, "method": method}
    for profile in profiles:
        value = _value(check, {"args": args, "facts": {"account": ACCOUNT, "profile": profile}})
        assert value is True, f"{check} spared the profile, but is {value!r} with profile={profile!r}"
