"""The executor's store paths: one durable transaction before the tool when the store can, the same outcomes when not."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from policyguard.enforcement.store import EffectRequest, SpendAndClaim, Spent, SQLiteStore
from policyguard.trajectory.messages import ToolCall

if TYPE_CHECKING:
    from conftest import Rig

T = TypeVar("T")
MakeRig = Callable[[SQLiteStore], "Rig"]


class SeparateCallsStore(SQLiteStore):
    """No SpendAndClaim capability: the executor falls back to consume, is_denied and begin_effect."""

    spend_and_claim = None  # type: ignore[assignment]


class CountingStore(SQLiteStore):
    """Counts write transactions (each one an fsync under synchronous=FULL)."""

    writes = 0

    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        self.writes += 1
        return super()._write(op)


class CountingSeparateStore(SeparateCallsStore):
    writes = 0

    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        self.writes += 1
        return super()._write(op)


def test_a_money_call_costs_one_write_before_the_tool_and_one_after(tmp_path: Path, rig_for: MakeRig) -> None:
    rig = rig_for(CountingStore(str(tmp_path / "a.db")))
    call = rig.call()
    rig.store.writes = 0  # type: ignore[attr-defined]
    result = rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1")
    assert result.executed and rig.store.writes == 2  # type: ignore[attr-defined]


def test_a_call_without_effect_costs_one_write(tmp_path: Path, rig_for: MakeRig) -> None:
    rig = rig_for(CountingStore(str(tmp_path / "a.db")))
    call = ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})
    rig.store.writes = 0  # type: ignore[attr-defined]
    token = rig.issuer.issue(call, principal="alice", resource=None, policy_version=rig.policy())
    assert rig.executor.execute(call, token, principal="alice", resource=None).executed
    assert rig.store.writes == 1  # type: ignore[attr-defined]


def test_a_store_without_the_capability_gets_the_separate_calls(tmp_path: Path, rig_for: MakeRig) -> None:
    store = CountingSeparateStore(str(tmp_path / "s.db"))
    assert not isinstance(store, SpendAndClaim)
    rig = rig_for(store)
    call = rig.call()
    store.writes = 0
    assert rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1").executed
    assert store.writes == 3  # nonce, claim, completion


def test_a_nonce_store_apart_from_the_ledger_gets_the_separate_calls(tmp_path: Path, rig_for: MakeRig) -> None:
    rig = rig_for(SQLiteStore(str(tmp_path / "l.db")))
    nonces = CountingStore(str(tmp_path / "n.db"))
    rig.verifier.nonces = nonces
    call = rig.call()
    assert rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1").executed
    assert nonces.writes == 1 and nonces.consume(rig.verifier.decode(rig.grant(call)).nonce, 1e12)
    assert [e.idempotency_key for e in rig.store.entries()] == ["key-c1"]


def test_every_outcome_is_the_same_on_both_paths(tmp_path: Path, rig_for: MakeRig) -> None:
    def outcomes(store: SQLiteStore) -> list[tuple[bool, str]]:
        rig = rig_for(store)
        first, retry, over = rig.call("c1"), rig.call("c2", key="key-c1"), rig.call("c3", amount=60)
        conflict = rig.call("c5", amount=5, key="key-c1")
        token = rig.grant(first)
        rig.store.deny("c4")
        denied = rig.call("c4")
        results = [
            rig.executor.execute(first, token, principal="alice", resource="O1"),
            rig.executor.execute(first, token, principal="alice", resource="O1"),
            rig.executor.execute(retry, rig.grant(retry), principal="alice", resource="O1"),
            rig.executor.execute(conflict, rig.grant(conflict), principal="alice", resource="O1"),
            rig.executor.execute(over, rig.grant(over), principal="alice", resource="O1"),
            rig.executor.execute(denied, rig.grant(denied), principal="alice", resource="O1"),
        ]
        return [(r.executed, r.reason) for r in results]

    combined = outcomes(SQLiteStore(str(tmp_path / "c.db")))
    separate = outcomes(SeparateCallsStore(str(tmp_path / "s.db")))
    assert (
        combined
        == separate
        == [
            (True, "executed"),
            (False, "replayed"),
            (False, "replayed_from_ledger"),
            (False, "idempotency_conflict"),
            (False, "exceeds_captured"),
            (False, "denied"),
        ]
    )


class ClaimsNothing(SQLiteStore):
    """A broken store: spends the grant but returns no claim for a money effect."""

    def spend_and_claim(self, nonce: str, expires_at: float, call_id: str, effect: EffectRequest | None) -> Spent:
        super().spend_and_claim(nonce, expires_at, call_id, None)
        return Spent(outcome="spent")


def test_a_store_that_claims_nothing_for_a_money_effect_is_inconclusive(tmp_path: Path, rig_for: MakeRig) -> None:
    rig = rig_for(ClaimsNothing(str(tmp_path / "b.db")))
    call = rig.call()
    result: Any = rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1")
    assert not result.executed and result.reason == "inconclusive"
    assert rig.refund.calls == []
