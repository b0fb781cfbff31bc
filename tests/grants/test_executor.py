"""The executor refuses by default; money effects are claimed in the ledger before they happen."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from policyguard.enforcement.executor import PENDING_REASON, GuardedExecutor
from policyguard.enforcement.store import EffectClaim, EffectRecord, LedgerUnavailable
from policyguard.errors import ConfigError
from policyguard.trajectory.messages import ToolCall

if TYPE_CHECKING:
    from conftest import Rig


def _run(rig: Rig, call: ToolCall, **grant_kw: Any) -> Any:
    return rig.executor.execute(call, rig.grant(call, **grant_kw), principal="alice", resource="O1")


def test_no_grant_means_no_call(rig: Rig) -> None:
    result = rig.executor.execute(rig.call(), None, principal="alice", resource="O1")
    assert not result.executed and result.reason == "no_grant"
    assert rig.refund.calls == [] and rig.store.entries() == []


def test_an_unregistered_tool_is_refused_even_with_a_grant(rig: Rig) -> None:
    call = ToolCall(id="c1", name="delete_everything", arguments={})
    assert _run(rig, call).reason == "unknown_tool"


def test_a_tool_without_an_effect_runs_under_a_grant(rig: Rig) -> None:
    call = ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})
    result = _run(rig, call)
    assert result.executed and result.result == {"order_id": "O1"}
    assert rig.store.entries() == []


def test_the_effect_is_recorded_in_the_ledger(rig: Rig) -> None:
    assert _run(rig, rig.call(amount=30, key="k1")).executed
    record = rig.store.lookup("k1")
    assert record is not None and record.status == "committed"
    assert (record.tool, record.transaction_id, record.amount) == ("issue_refund", "O1", 30)
    assert rig.store.total("O1") == 30


def test_a_retry_with_the_same_key_returns_the_recorded_result_without_a_second_refund(rig: Rig) -> None:
    first = _run(rig, rig.call("c1", key="k1"))
    retry = _run(rig, rig.call("c2", key="k1"))
    assert retry.replayed_from_ledger and not retry.executed
    assert retry.result == first.result
    assert len(rig.refund.calls) == 1 and rig.store.total("O1") == 50


def test_a_pending_key_is_refused_until_looked_up(rig: Rig) -> None:
    rig.store.begin_effect(
        "k1",
        tool="issue_refund",
        transaction_id="O1",
        amount=50,
        currency=None,
        args_sha256=rig.call(key="k1").args_sha256,
    )
    result = _run(rig, rig.call(key="k1"))
    assert not result.executed and result.reason == PENDING_REASON
    assert rig.refund.calls == []


def test_the_same_key_for_different_arguments_is_refused(rig: Rig) -> None:
    assert _run(rig, rig.call("c1", amount=20, key="k1")).executed
    result = _run(rig, rig.call("c2", amount=30, key="k1"))
    assert not result.executed and result.reason == "idempotency_conflict"


def test_refunds_never_exceed_what_was_captured(rig: Rig) -> None:
    assert _run(rig, rig.call("c1", amount=60)).executed
    over = _run(rig, rig.call("c2", amount=41))
    assert not over.executed and over.reason == "exceeds_captured"
    assert _run(rig, rig.call("c3", amount=40)).executed
    assert rig.store.total("O1") == 100 and len(rig.refund.calls) == 2


def test_an_unknown_captured_amount_refuses_the_refund(rig: Rig) -> None:
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O9", "amount": 1, "idempotency_key": "k"})
    result = rig.executor.execute(call, rig.grant(call, resource="O9"), principal="alice", resource="O9")
    assert not result.executed and result.reason == "exceeds_captured"


def test_the_tool_ceiling_applies_whatever_the_grant_says(rig: Rig) -> None:
    rig.store.set_captured("O1", 5000)
    assert _run(rig, rig.call(amount=1001)).reason == "exceeds_ceiling"


def test_malformed_money_arguments_are_refused_before_the_grant_is_spent(rig: Rig) -> None:
    bad = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50})
    token = rig.grant(bad)
    assert rig.executor.execute(bad, token, principal="alice", resource="O1").reason == "effect_args"
    for amount in (-5, 0, True, "50"):
        args = {"order_id": "O1", "amount": amount, "idempotency_key": "k"}
        call = ToolCall(id="c1", name="issue_refund", arguments=args)
        assert rig.executor.execute(call, None, principal="alice", resource="O1").reason == "effect_args"
    nan = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": float("nan")})
    assert rig.executor.execute(nan, None, principal="alice", resource="O1").reason == "bad_arguments"
    # the grant was not burned: the verifier still accepts it once
    assert rig.verifier.verify(token, bad, principal="alice", resource="O1").call_id == "c1"


def test_the_resource_argument_must_be_the_authorised_resource(rig: Rig) -> None:
    call = rig.call(order="O2")
    result = rig.executor.execute(call, rig.grant(call, resource="O1"), principal="alice", resource="O1")
    assert not result.executed and result.reason == "binding:resource"


def test_a_ledger_failure_is_inconclusive_and_nothing_runs(rig: Rig) -> None:
    class BrokenLedger:
        def begin_effect(self, *a: Any, **kw: Any) -> EffectClaim:
            raise LedgerUnavailable("disk gone")

    executor = GuardedExecutor(
        {"issue_refund": rig.refund}, verifier=rig.verifier, ledger=BrokenLedger(), checklist=rig.executor.checklist
    )  # type: ignore[arg-type]
    call = rig.call()
    result = executor.execute(call, rig.grant(call), principal="alice", resource="O1")
    assert not result.executed and result.reason == "inconclusive"
    assert rig.refund.calls == []


def test_a_money_tool_without_a_ledger_is_refused_at_construction(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="'issue_refund' moves money and the executor has no ledger"):
        GuardedExecutor(
            {"issue_refund": rig.refund}, verifier=rig.verifier, ledger=None, checklist=rig.executor.checklist
        )


def test_a_failing_tool_leaves_its_claim_pending(rig: Rig) -> None:
    def flaky(**kw: Any) -> None:
        raise TimeoutError("bank did not answer")

    rig.executor.tools["issue_refund"] = flaky
    result = _run(rig, rig.call(key="k1"))
    assert result.executed and result.error == "TimeoutError: bank did not answer"
    record = rig.store.lookup("k1")
    assert isinstance(record, EffectRecord) and record.status == "pending"
    assert _run(rig, rig.call("c2", key="k1")).reason == PENDING_REASON


def test_trace_has_execute_then_effect_and_nothing_on_refusal(rig: Rig) -> None:
    call = rig.call(key="k1")
    _run(rig, call)
    rig.executor.execute(rig.call("c2"), None, principal="alice", resource="O1")
    events = [(e["event"], e["call_id"]) for e in rig.trace.events]
    assert events == [("execute", "c1"), ("effect", "c1")]
    effect = rig.trace.events[1]
    assert effect["args_sha256"] == call.args_sha256
    assert (effect["idempotency_key"], effect["amount"], effect["transaction_id"]) == ("k1", 50, "O1")


def _hammer(n: int, work: Any) -> list[Any]:
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_sixteen_threads_with_one_grant_execute_once(file_rig: Rig) -> None:
    call = file_rig.call()
    token = file_rig.grant(call)
    results = _hammer(16, lambda i: file_rig.executor.execute(call, token, principal="alice", resource="O1"))
    assert sum(r.executed for r in results) == 1
    assert sorted({r.reason for r in results}) == ["executed", "replayed"]
    assert len(file_rig.refund.calls) == 1


def test_sixteen_threads_with_one_grant_execute_once_in_memory(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    results = _hammer(16, lambda i: rig.executor.execute(call, token, principal="alice", resource="O1"))
    assert sum(r.executed for r in results) == 1 and len(rig.refund.calls) == 1


def test_sixteen_threads_with_one_idempotency_key_refund_once(file_rig: Rig) -> None:
    calls = [file_rig.call(f"c{i}", key="same") for i in range(16)]
    tokens = [file_rig.grant(call) for call in calls]
    results = _hammer(16, lambda i: file_rig.executor.execute(calls[i], tokens[i], principal="alice", resource="O1"))
    assert sum(r.executed for r in results) == 1
    assert len(file_rig.refund.calls) == 1
    assert {r.reason for r in results} <= {"executed", "replayed_from_ledger", PENDING_REASON}
    assert file_rig.store.total("O1") == 50 and len(file_rig.store.entries()) == 1


def test_sixteen_threads_with_different_keys_never_exceed_captured(file_rig: Rig) -> None:
    calls = [file_rig.call(f"c{i}", amount=30, key=f"k{i}") for i in range(16)]
    tokens = [file_rig.grant(call) for call in calls]
    results = _hammer(16, lambda i: file_rig.executor.execute(calls[i], tokens[i], principal="alice", resource="O1"))
    assert sum(r.executed for r in results) == 3
    assert file_rig.store.total("O1") == 90 and len(file_rig.refund.calls) == 3
