"""Which tools move money is configuration the executor refuses to guess; money it cannot verify does not move."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from policyguard.checklist.schema import Checklist, EffectSpec
from policyguard.enforcement.approvalcheck import MoneyEffect, RecordApprovals
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.errors import ConfigError
from policyguard.trajectory.messages import ToolCall

if TYPE_CHECKING:
    from conftest import Rig

REFUND = EffectSpec(transaction_arg="order_id", resource_arg="order_id", ceiling=1000)


def declared(rig: Rig, effect: EffectSpec = REFUND, **kw: Any) -> GuardedExecutor:
    """The rig's refund tool behind an executor that declares its effect without a checklist."""
    return GuardedExecutor(
        {"issue_refund": rig.refund}, verifier=rig.verifier, ledger=rig.store, effects={"issue_refund": effect}, **kw
    )


def run(rig: Rig, executor: GuardedExecutor, call: ToolCall) -> Any:
    return executor.execute(call, rig.grant(call), principal="alice", resource="O1")


def test_an_executor_without_checklist_or_effects_is_not_built(rig: Rig) -> None:
    """Without a checklist the old executor skipped the ledger: three refunds of 80 on a 100 capture all ran."""
    with pytest.raises(ConfigError, match="checklist= or effects="):
        GuardedExecutor({"issue_refund": rig.refund}, verifier=rig.verifier, ledger=rig.store)


def test_effects_of_none_is_an_explicit_declaration(rig: Rig) -> None:
    executor = GuardedExecutor(
        {"get_order": lambda order_id: {"id": order_id}}, verifier=rig.verifier, ledger=None, effects={}
    )
    call = ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})
    assert run(rig, executor, call).executed


def test_a_declared_money_tool_keeps_the_ledger_without_a_checklist(rig: Rig) -> None:
    executor = declared(rig)
    results = [run(rig, executor, rig.call(f"c{i}", amount=80, key="same")) for i in range(3)]
    assert [r.executed for r in results] == [True, False, False]
    assert all(r.replayed_from_ledger for r in results[1:])
    other_key = run(rig, executor, rig.call("c9", amount=80, key="other"))
    assert other_key.reason == "exceeds_captured"
    assert len(rig.refund.calls) == 1 and rig.store.total("O1") == 80


def test_a_declared_money_tool_without_a_ledger_is_refused_naming_the_tool(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="'issue_refund' moves money"):
        GuardedExecutor(
            {"issue_refund": rig.refund}, verifier=rig.verifier, ledger=None, effects={"issue_refund": REFUND}
        )


def test_an_effect_declared_for_an_unregistered_tool_is_a_config_error(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="'issue_refnd'"):
        GuardedExecutor(
            {"issue_refund": rig.refund}, verifier=rig.verifier, ledger=rig.store, effects={"issue_refnd": REFUND}
        )


def test_a_registered_tool_the_checklist_does_not_name_is_a_config_error(rig: Rig) -> None:
    checklist = Checklist.model_validate(
        {"policy": {"name": "p", "version": "sha256:" + "1" * 64}, "tools": {"issue_refnd": {"effect": REFUND}}}
    )
    with pytest.raises(ConfigError, match="'issue_refund' is registered .* the checklist does not name it"):
        GuardedExecutor({"issue_refund": rig.refund}, verifier=rig.verifier, ledger=rig.store, checklist=checklist)


def test_checklist_and_effects_together_are_ambiguous(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="not both"):
        GuardedExecutor(
            {"issue_refund": rig.refund},
            verifier=rig.verifier,
            ledger=rig.store,
            checklist=rig.executor.checklist,
            effects={"issue_refund": REFUND},
        )


@pytest.mark.parametrize("field", ["ceiling", "approval_threshold"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -1.0])
def test_a_ceiling_or_threshold_that_is_not_a_positive_number_is_a_config_error(
    rig: Rig, field: str, value: float
) -> None:
    with pytest.raises(ConfigError, match=f"effect.{field}"):
        declared(rig, REFUND.model_copy(update={field: value}))


@pytest.mark.parametrize("amount", [-50, "50", 0, 0.0, float("nan"), float("inf"), True, None, [50], 2**60])
def test_amounts_that_are_not_positive_finite_exact_numbers_never_move_money(rig: Rig, amount: object) -> None:
    executor = declared(rig)
    good = rig.call("c1", key="k")
    token = rig.grant(good)  # a valid grant for call c1; the refusal must come before it is spent
    call = ToolCall(id="c1", name="issue_refund", arguments={**good.arguments, "amount": amount})
    result = executor.execute(call, token, principal="alice", resource="O1")
    assert not result.executed and result.reason in ("effect_args", "bad_arguments")
    assert rig.refund.calls == [] and rig.store.entries() == []
    assert rig.verifier.verify(token, good, principal="alice", resource="O1").call_id == "c1"


def test_deeply_nested_arguments_are_refused_not_a_crash(rig: Rig) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 5, "note": deep})
    result = declared(rig).execute(call, "token", principal="alice", resource="O1")
    assert not result.executed and result.reason == "bad_arguments" and "deeper" in (result.error or "")


# -- approval_threshold -------------------------------------------------------------

LARGE = REFUND.model_copy(update={"approval_threshold": 60})


def large_call(call_id: str = "c1", *, amount: float = 80, approval: str | None = "A-1") -> ToolCall:
    args: dict[str, Any] = {"order_id": "O1", "amount": amount, "idempotency_key": f"k-{call_id}"}
    if approval is not None:
        args["approval_id"] = approval
    return ToolCall(id=call_id, name="issue_refund", arguments=args)


def approving(record: dict[str, Any] | None) -> RecordApprovals:
    return RecordApprovals(lambda approval_id: record)


def test_above_the_threshold_without_an_approval_check_is_refused_as_needs_approval(rig: Rig) -> None:
    call = large_call()
    token = rig.grant(call)
    result = declared(rig, LARGE).execute(call, token, principal="alice", resource="O1")
    assert not result.executed and result.reason == "needs_approval" and "approval threshold 60" in (result.error or "")
    assert rig.refund.calls == []
    assert rig.verifier.verify(token, call, principal="alice", resource="O1")  # refused before the grant was spent


def test_at_or_below_the_threshold_no_approval_is_needed(rig: Rig) -> None:
    assert run(rig, declared(rig, LARGE), large_call(amount=60, approval=None)).executed


def test_an_approval_for_this_transaction_covering_the_amount_lets_it_run(rig: Rig) -> None:
    record = {"status": "approved", "transaction_id": "O1", "amount": 80}
    assert run(rig, declared(rig, LARGE, approvals=approving(record)), large_call()).executed


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"status": "approved", "transaction_id": "O2", "amount": 80}, "another transaction"),
        ({"status": "approved", "transaction_id": "O1", "amount": 79}, "covers 79"),
        ({"status": "pending", "transaction_id": "O1", "amount": 80}, "'pending'"),
        ({"status": "approved", "transaction_id": "O1", "amount": float("nan")}, "no valid amount"),
        (None, "not found"),
    ],
)
def test_an_approval_that_does_not_cover_this_effect_is_refused(
    rig: Rig, record: dict[str, Any] | None, why: str
) -> None:
    result = run(rig, declared(rig, LARGE, approvals=approving(record)), large_call())
    assert not result.executed and result.reason == "needs_approval" and why in (result.error or "")
    assert rig.refund.calls == []


def test_no_approval_argument_or_a_failing_lookup_approves_nothing(rig: Rig) -> None:
    def broken(approval_id: str) -> dict[str, Any]:
        raise TimeoutError("approvals service down")

    assert run(rig, declared(rig, LARGE, approvals=approving({})), large_call(approval=None)).reason == "needs_approval"
    result = run(rig, declared(rig, LARGE, approvals=RecordApprovals(broken)), large_call("c2"))
    assert result.reason == "needs_approval" and "could not be read" in (result.error or "")


def test_an_approval_check_that_raises_refuses(rig: Rig) -> None:
    def crashing(call: ToolCall, effect: MoneyEffect) -> str | None:
        raise RuntimeError("bug")

    result = run(rig, declared(rig, LARGE, approvals=crashing), large_call())
    assert not result.executed and result.reason == "needs_approval"
