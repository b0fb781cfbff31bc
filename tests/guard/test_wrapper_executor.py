"""GuardedTools with grants and the verdict-gated executor: the whole path, audited."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from policyguard import (
    ConfigError,
    GrantIssuer,
    GrantVerifier,
    Guard,
    GuardedExecutor,
    GuardedTools,
    HardGate,
    Message,
    SQLiteStore,
    ToolCall,
    Trace,
    Trajectory,
    generate_keypair,
    parse_checklist,
)
from policyguard.audit.inv1 import audit_records
from policyguard.trajectory.canonical import policy_version

POLICY = "Refunds never exceed what was captured.\n"
CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
    facts:
      order: {{tool: get_order, match: {{order_id: args.order_id}}}}
    tools:
      get_order: {{mutating: false}}
      issue_refund:
        effect: {{kind: money, amount_arg: amount, transaction_arg: order_id, idempotency_arg: idempotency_key}}
        requirements:
          - id: within-captured
            text: The refund does not exceed the captured amount.
            kind: data
            source: Refunds never exceed what was captured.
            prerequisites: [get_order]
            check: args.amount <= facts.order.captured
    """
)


@pytest.fixture
def setup() -> tuple[GuardedTools, list[Any], Trace]:
    checklist = parse_checklist(CHECKLIST)
    private, public = generate_keypair()
    store = SQLiteStore()
    store.set_captured("O1", 80)
    trace = Trace()
    effects: list[Any] = []

    def get_order(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "captured": 80}

    def issue_refund(order_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
        effects.append((order_id, amount, idempotency_key))
        return {"status": "issued"}

    guard = Guard(
        checklist,
        POLICY,
        gate=HardGate(checklist),
        allow_unverified=True,
        trace=trace,
        grants=GrantIssuer(private),
        denials=store,
    )
    executor = GuardedExecutor(
        {"get_order": get_order, "issue_refund": issue_refund},
        verifier=GrantVerifier(public, nonces=store, current_policy_version=lambda: checklist.policy.version),
        ledger=store,
        checklist=checklist,
        trace=trace,
    )
    return GuardedTools(guard, executor=executor), effects, trace


def _dialogue() -> Trajectory:
    read = ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})
    return Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="r1", content='{"order_id": "O1", "captured": 80}'),
        ]
    )


def test_allowed_refund_runs_once_through_the_executor_and_the_trace_audits_clean(setup) -> None:  # type: ignore[no-untyped-def]
    tools, effects, trace = setup
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": "k1"})
    outcome = tools.run(call, _dialogue())
    assert outcome.executed and not outcome.is_error
    retry = ToolCall(id="c2", name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": "k1"})
    again = tools.run(retry, _dialogue())
    assert not again.executed and not again.is_error  # answered from the ledger
    assert effects == [("O1", 50, "k1")]
    report = audit_records(trace.events)
    assert report.ok, report.violations
    assert report.executes == 1


def test_blocked_refund_never_reaches_the_executor(setup) -> None:  # type: ignore[no-untyped-def]
    tools, effects, trace = setup
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 90, "idempotency_key": "k1"})
    outcome = tools.run(call, _dialogue())
    assert not outcome.executed and outcome.is_error
    assert effects == []
    assert not [e for e in trace.events if e["event"] in ("execute", "effect")]


def test_an_executor_needs_a_guard_that_issues_grants() -> None:
    checklist = parse_checklist(CHECKLIST)
    guard = Guard(checklist, POLICY, allow_unverified=True)
    with pytest.raises(ConfigError, match="grants"):
        GuardedTools(guard, executor=object())  # type: ignore[arg-type]


def test_an_executor_needs_a_guard_that_records_denials_in_the_executors_store(setup) -> None:  # type: ignore[no-untyped-def]
    tools, _, _ = setup
    guard = Guard(tools.guard.checklist, POLICY, allow_unverified=True, grants=tools.guard.grants)
    with pytest.raises(ConfigError, match="denials"):
        GuardedTools(guard, executor=tools.executor)


def test_a_call_blocked_once_is_never_executed_through_the_wrapper(setup) -> None:  # type: ignore[no-untyped-def]
    tools, effects, _ = setup
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50, "idempotency_key": "k1"})
    blocked = tools.run(call, Trajectory())  # no read of the order yet: blocked
    assert blocked.is_error and not blocked.executed
    again = tools.run(call, _dialogue())  # the same call id after the read: deny wins
    assert again.is_error and not again.executed and effects == []
