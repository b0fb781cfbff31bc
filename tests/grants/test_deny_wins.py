"""Deny wins: a call id the guard denied once is never executed, and the executor and the audit agree."""

from __future__ import annotations

import textwrap
from typing import Any

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
