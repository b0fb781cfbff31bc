"""Every backend behaves like one small reference model, for any sequence of ledger operations.

Hypothesis draws sequences of claims (with and without the ceiling), completions,
releases and captured amounts; each step's answer from the store must equal the
model's. The ``store`` fixture runs this against each backend, so SQLite and
PostgreSQL cannot drift apart on an edge nobody wrote a test for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.enforcement.store import LedgerUnavailable, Store

KEYS = st.sampled_from(["k1", "k2", "k3", "k4"])
TXS = st.sampled_from(["T1", "T2"])
AMOUNTS = st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0])

OPS = st.one_of(
    st.tuples(st.just("captured"), TXS, st.sampled_from([0.0, 5.0, 12.0])),
    st.tuples(st.just("claim"), KEYS, TXS, AMOUNTS, st.booleans()),
    st.tuples(st.just("complete"), KEYS),
    st.tuples(st.just("release"), KEYS),
)


@dataclass
class Model:
    """What the contract says, in plain Python."""

    effects: dict[str, tuple[str, float, str]] = field(default_factory=dict)  # key -> (tx, amount, status)
    captured: dict[str, float] = field(default_factory=dict)

    def claimed(self, tx: str) -> float:
        return sum(amount for t, amount, _ in self.effects.values() if t == tx)

    def claim(self, key: str, tx: str, amount: float, enforce: bool) -> tuple[bool, str | None]:
        if key in self.effects:
            return False, None
        if enforce:
            if tx not in self.captured:
                return False, "captured amount unknown"
            if self.claimed(tx) + amount > self.captured[tx] + 1e-9:
                return False, "would exceed"
        self.effects[key] = (tx, amount, "pending")
        return True, None

    def complete(self, key: str) -> bool:
        if key not in self.effects or self.effects[key][2] != "pending":
            return False
        tx, amount, _ = self.effects[key]
        self.effects[key] = (tx, amount, "committed")
        return True

    def release(self, key: str) -> bool:
        if key in self.effects and self.effects[key][2] == "pending":
            del self.effects[key]
            return True
        return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=25))
def test_any_sequence_of_operations_matches_the_reference_model(store: Store, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    run = uuid.uuid4().hex[:8]  # each example works on its own keys and transactions
    model = Model()

    def k(name: str) -> str:
        return f"{run}:{name}"

    for op in ops:
        if op[0] == "captured":
            _, tx, amount = op
            store.set_captured(k(tx), amount)
            model.captured[tx] = amount
        elif op[0] == "claim":
            _, key, tx, amount, enforce = op
            claim = store.begin_effect(
                k(key),
                tool="refund",
                transaction_id=k(tx),
                amount=amount,
                currency=None,
                args_sha256="a",
                enforce_captured=enforce,
            )
            created, refusal = model.claim(key, tx, amount, enforce)
            assert claim.created == created, op
            assert (claim.refusal is None) == (refusal is None), (op, claim.refusal)
            if refusal is not None:
                assert claim.refusal is not None and claim.refusal.startswith(refusal)
            if not created and refusal is None:  # the existing record comes back, unchanged
                assert claim.record is not None and claim.record.amount == model.effects[key][1]
                assert claim.record.status == model.effects[key][2]
        elif op[0] == "complete":
            expected = model.complete(op[1])
            if expected:
                store.complete_effect(k(op[1]), "{}")
            else:
                with pytest.raises(LedgerUnavailable):
                    store.complete_effect(k(op[1]), "{}")
        else:
            assert store.release_pending(k(op[1])) == model.release(op[1]), op
    for tx in ("T1", "T2"):
        committed = sum(a for t, a, s in model.effects.values() if t == tx and s == "committed")
        assert store.total(k(tx)) == pytest.approx(committed)
        assert store.captured(k(tx)) == model.captured.get(tx)
    mine = {e.idempotency_key: e.status for e in store.entries() if e.idempotency_key.startswith(f"{run}:")}
    assert mine == {k(key): status for key, (_, _, status) in model.effects.items()}
