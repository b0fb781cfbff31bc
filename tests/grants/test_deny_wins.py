"""Deny wins: a call id the guard denied once is never executed, and the executor and the audit agree."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from policyguard import GrantIssuer, GrantVerifier, Guard, GuardedExecutor, HardGate, parse_checklist
from policyguard.audit.inv1 import audit_records
from policyguard.audit.trace import Trace
from policyguard.enforcement.grants import generate_keypair
from policyguard.enforcement.store import LedgerUnavailable, SQLiteStore
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

POLICY = "Refunds never exceed what was captured.\n"
CHECKLIST = parse_checklist(
    textwrap.dedent(
        f"""
        policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
        facts:
          order: {{tool: get_order, match: {{order_id: args.order_id}}}}
        tools:
          get_order: {{mutating: false}}
          issue_refund:
            effect: {{kind: money, amount_arg: amount, transaction_arg: order_id}}
            requirements:
              - id: within-captured
                text: The refund does not exceed the captured amount.
                kind: data
                source: Refunds never exceed what was captured.
                prerequisites: [get_order]
                check: args.amount <= facts.order.captured
        """
    )
)
KEYS = generate_keypair()
CALL = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": "k1"})


def before_read() -> Trajectory:
    return Trajectory(messages=[Message(role="user", content="refund O1")])


def after_read() -> Trajectory:
    read = ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})
    return Trajectory(
        messages=[
            Message(role="user", content="refund O1"),
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="r1", name="get_order", content='{"order_id": "O1", "captured": 80}'),
        ]
    )


def wiring(store: Any, trace: Trace, *, guard_store: bool = True) -> tuple[Guard, GuardedExecutor, list[Any]]:
    effects: list[Any] = []

    def issue_refund(**args: Any) -> dict[str, str]:
        effects.append(args)
        return {"status": "issued"}

    guard = Guard(
        CHECKLIST,
        POLICY,
        gate=HardGate(CHECKLIST),
        allow_unverified=True,
        trace=trace,
        grants=GrantIssuer(KEYS[0]),
        denials=store if guard_store else None,
    )
    executor = GuardedExecutor(
        {"issue_refund": issue_refund},
        verifier=GrantVerifier(KEYS[1], nonces=store, current_policy_version=lambda: CHECKLIST.policy.version),
        ledger=store,
        checklist=CHECKLIST,
        trace=trace,
    )
    return guard, executor, effects


def test_block_then_recheck_of_the_same_call_id_is_still_a_block() -> None:
    """The old guard allowed the re-check and the executor ran a call the audit reported as denied."""
    store, trace = SQLiteStore(), Trace()
    store.set_captured("O1", 80)
    guard, executor, effects = wiring(store, trace)
    first = guard.check(CALL, before_read())
    assert first.outcome == "block" and not store.is_denied("c1")  # keyed by the call's identity, not its bare id
    again = guard.check(CALL, after_read())
    assert again.outcome == "block" and again.grant is None and "denied earlier" in (again.error or "")
    assert not executor.execute(CALL, again.grant, principal=None, resource=None).executed
    assert effects == []
    report = audit_records(trace.events)
    assert report.ok and report.executes == 0


def test_the_executor_refuses_a_denied_call_id_whatever_grant_it_is_shown() -> None:
    """A second guard (another process) that never saw the deny still cannot get the call executed."""
    store, trace = SQLiteStore(), Trace()
    store.set_captured("O1", 80)
    guard, executor, effects = wiring(store, trace)
    assert guard.check(CALL, before_read()).outcome == "block"
    other, _, _ = wiring(SQLiteStore(), trace, guard_store=False)
    allowed = other.check(CALL, after_read())
    assert allowed.outcome == "allow" and allowed.grant
    result = executor.execute(CALL, allowed.grant, principal=None, resource=None)
    assert not result.executed and result.reason == "denied"
    assert effects == []
    report = audit_records(trace.events)  # deny, then allow, and no execute: the audit agrees
    assert report.ok and report.executes == 0


def test_a_new_call_id_after_the_read_is_judged_on_its_own() -> None:
    store, trace = SQLiteStore(), Trace()
    store.set_captured("O1", 80)
    guard, executor, effects = wiring(store, trace)
    assert guard.check(CALL, before_read()).outcome == "block"
    retry = CALL.model_copy(update={"id": "c2"})
    decision = guard.check(retry, after_read())
    assert decision.outcome == "allow"
    assert executor.execute(retry, decision.grant, principal=None, resource=None).executed
    assert len(effects) == 1 and audit_records(trace.events).ok


class BrokenStore:
    """A deny store that cannot be reached."""

    def deny(self, call_id: str) -> None:
        raise LedgerUnavailable("store offline")

    def is_denied(self, call_id: str) -> bool:
        raise LedgerUnavailable("store offline")


def test_an_unreachable_deny_store_blocks_and_is_written_to_the_trace() -> None:
    trace = Trace()
    guard = Guard(
        CHECKLIST, POLICY, gate=HardGate(CHECKLIST), allow_unverified=True, trace=trace, denials=BrokenStore()
    )  # type: ignore[arg-type]
    assert guard.check(CALL, before_read()).outcome == "block"
    [deny] = [e for e in trace.events if e["event"] == "deny"]
    assert deny["deny_recorded"] is False and "store offline" in deny["store_error"]
    decision = guard.check(CALL.model_copy(update={"id": "c2"}), after_read())
    assert decision.outcome == "block" and "deny store unavailable" in (decision.error or "")


# -- a deny names one issued call: its session, id, tool, arguments and message ---------------
#
# Stacks that number calls per turn send `call_0` every turn. The guard records a deny under
# the call's identity (policyguard.enforcement.scoped.CallIdentity), its place being the
# message that issued it (policyguard.guard.calls.call_place).

ORDER = '{"order_id": "O1", "captured": 80}'
REFUND = ToolCall(id="call_0", name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": "k1"})
READ = ToolCall(id="call_0", name="get_order", arguments={"order_id": "O1"})


class SeparateCallsStore(SQLiteStore):
    """No combined spend-and-claim: the executor reads the deny keys one by one after spending the nonce."""

    spend_and_claim = None  # type: ignore[assignment]


STORES = [SQLiteStore, SeparateCallsStore]


def asks(call: ToolCall) -> Message:
    return Message(role="assistant", tool_calls=[call])


def answer(call: ToolCall, content: str) -> Message:
    return Message(role="tool", tool_call_id=call.id, name=call.name, content=content)


def turn_1() -> list[Message]:
    """The refund is asked for before the order was read: the gate blocks it."""
    return [Message(role="user", content="refund O1"), asks(REFUND)]


def turn_2() -> list[Message]:
    """The refusal went back to the model, which read the order reusing call_0."""
    return [*turn_1(), answer(REFUND, "refused"), asks(READ), answer(READ, ORDER)]


def refused_earlier(decision: Any) -> bool:
    return decision.outcome == "block" and "denied earlier" in (decision.error or "")


def blocked_in_turn_1(store_type: type[SQLiteStore] = SQLiteStore) -> tuple[Guard, GuardedExecutor, list[Any]]:
    store = store_type()
    store.set_captured("O1", 80)
    guard, executor, effects = wiring(store, Trace())
    first = guard.check(REFUND, Trajectory(messages=turn_1()))
    assert first.outcome == "block" and first.stage == "gate"
    return guard, executor, effects


# What deny wins still refuses


def test_the_same_issued_call_rechecked_with_its_refusal_and_a_read_appended_is_refused() -> None:
    guard, _, _ = blocked_in_turn_1()
    assert refused_earlier(guard.check(REFUND, Trajectory(messages=turn_2())))  # the gate alone would allow it now


def test_a_recheck_that_shows_the_call_where_the_first_check_did_not_is_refused() -> None:
    """The first check had no place (its trajectory did not show the call): it stands for every place."""
    store, trace = SQLiteStore(), Trace()
    guard, _, _ = wiring(store, trace)
    assert guard.check(REFUND, before_read()).outcome == "block"
    assert refused_earlier(guard.check(REFUND, Trajectory(messages=turn_2())))


def test_a_recheck_that_no_longer_shows_a_denied_call_is_refused() -> None:
    guard, _, _ = blocked_in_turn_1()
    assert refused_earlier(guard.check(REFUND, after_read()))


@pytest.mark.parametrize("store_type", STORES)
def test_a_grant_issued_before_the_same_issued_call_was_denied_is_refused(store_type: type[SQLiteStore]) -> None:
    """Another guard allowed message 3's call_0 on captured 80; this one blocks it on captured 10."""
    store = store_type()
    store.set_captured("O1", 80)
    guard, executor, effects = wiring(store, Trace())
    other, _, _ = wiring(SQLiteStore(), Trace(), guard_store=False)
    read = [Message(role="user", content="refund O1"), asks(READ)]
    allowed = other.check(REFUND, Trajectory(messages=[*read, answer(READ, ORDER), asks(REFUND)]))
    assert allowed.outcome == "allow" and allowed.grant
    low = answer(READ, '{"order_id": "O1", "captured": 10}')
    assert guard.check(REFUND, Trajectory(messages=[*read, low, asks(REFUND)])).outcome == "block"
    result = executor.execute(REFUND, allowed.grant, principal=None, resource=None)
    assert (result.executed, result.reason, effects) == (False, "denied", [])


@pytest.mark.parametrize("store_type", STORES)
def test_a_grant_that_does_not_say_which_issuance_it_is_is_refused_by_a_deny_at_any_place(
    store_type: type[SQLiteStore],
) -> None:
    """No `place` claim (an older grant, or an issuer that did not know it): the stricter identity."""
    _, executor, effects = blocked_in_turn_1(store_type)
    placeless = GrantIssuer(KEYS[0]).issue(
        REFUND, principal=None, resource=None, policy_version=CHECKLIST.policy.version
    )
    result = executor.execute(REFUND, placeless, principal=None, resource=None)
    assert (result.executed, result.reason, effects) == (False, "denied", [])


@pytest.mark.parametrize("store_type", STORES)
def test_a_deny_under_the_bare_call_id_refuses_every_call_with_that_id(store_type: type[SQLiteStore]) -> None:
    """A reviewer's refusal through the approval queue, or a store written before identities."""
    store = store_type()
    store.set_captured("O1", 80)
    store.deny("call_0")
    guard, executor, effects = wiring(store, Trace())
    other, _, _ = wiring(SQLiteStore(), Trace(), guard_store=False)
    turn_3 = Trajectory(messages=[*turn_2(), asks(REFUND)])
    assert refused_earlier(guard.check(READ, Trajectory(messages=turn_2())))
    assert refused_earlier(guard.check(REFUND, turn_3))
    grant = other.check(REFUND, turn_3).grant
    assert grant and executor.execute(REFUND, grant, principal=None, resource=None).reason == "denied"
    assert effects == []


# What deny wins no longer refuses: a later call that reuses the id is another call


def test_turn_2s_call_0_to_another_tool_is_judged_on_its_own() -> None:
    """The old guard refused this read of the order: turn 1's call_0 had been denied."""
    guard, _, _ = blocked_in_turn_1()
    decision = guard.check(READ, Trajectory(messages=[*turn_1(), answer(REFUND, "refused"), asks(READ)]))
    assert (decision.outcome, decision.stage) == ("allow", "read_only")


@pytest.mark.parametrize("store_type", STORES)
def test_turn_3s_call_0_with_the_same_tool_and_arguments_in_a_later_message_runs(
    store_type: type[SQLiteStore],
) -> None:
    guard, executor, effects = blocked_in_turn_1(store_type)
    decision = guard.check(REFUND, Trajectory(messages=[*turn_2(), asks(REFUND)]))
    assert (decision.outcome, decision.stage) == ("allow", "gate") and decision.grant
    assert executor.execute(REFUND, decision.grant, principal=None, resource=None).executed
    assert effects == [REFUND.arguments]


def test_turn_3s_call_0_with_other_arguments_runs() -> None:
    guard, executor, effects = blocked_in_turn_1()
    smaller = REFUND.model_copy(update={"arguments": {**REFUND.arguments, "amount": 40}})
    decision = guard.check(smaller, Trajectory(messages=[*turn_2(), asks(smaller)]))
    assert decision.outcome == "allow" and decision.grant
    assert executor.execute(smaller, decision.grant, principal=None, resource=None).executed
    assert effects == [smaller.arguments]


def test_another_conversations_call_0_is_judged_on_its_own() -> None:
    guard, _, _ = blocked_in_turn_1()
    in_a = guard.check(REFUND, Trajectory(messages=turn_1()), session="A")
    assert in_a.outcome == "block"
    in_b = guard.check(REFUND, Trajectory(messages=turn_2()), session="B")
    assert refused_earlier(guard.check(REFUND, Trajectory(messages=turn_2()), session="A"))
    assert in_b.outcome == "allow"
