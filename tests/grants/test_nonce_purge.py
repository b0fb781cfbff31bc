"""Spent nonces are forgotten once their grants have expired, so the store does not grow forever.

The verifier purges from the consumer side (every N consumes or T seconds); the
store never purges on its own. Forgetting a nonce must never let its grant be
replayed: an expired grant is refused before its nonce is looked at.
"""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.enforcement.grants import GrantError, GrantIssuer, GrantVerifier
from policyguard.enforcement.purge import NoncePurger
from policyguard.enforcement.store import SQLiteStore

from .conftest import Clock, Policy, refund_call


class CountingStore:
    """The SQLite store, counting purges (and optionally failing them)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.inner = SQLiteStore()
        self.purges: list[float] = []
        self.fail = fail

    def consume(self, nonce: str, expires_at: float) -> bool:
        return self.inner.consume(nonce, expires_at)

    def deny(self, call_id: str) -> None:
        self.inner.deny(call_id)

    def is_denied(self, call_id: str) -> bool:
        return self.inner.is_denied(call_id)

    def purge_expired(self, now: float) -> int:
        self.purges.append(now)
        if self.fail:
            raise OSError("disk I/O error")
        return self.inner.purge_expired(now)

    def nonces(self) -> int:
        with self.inner._tx(immediate=False) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM nonces").fetchone()[0])


def _setup(keys: tuple[bytes, bytes], store: Any, **purge: Any) -> tuple[GrantIssuer, GrantVerifier, Clock]:
    clock, policy = Clock(), Policy()
    issuer = GrantIssuer(keys[0], ttl_s=60, clock=clock)
    purger = NoncePurger(store, clock=clock, **purge)
    verifier = GrantVerifier(keys[1], nonces=store, current_policy_version=policy, clock=clock, purger=purger)
    return issuer, verifier, clock


def _use(issuer: GrantIssuer, verifier: GrantVerifier, call_id: str) -> str:
    call = refund_call(call_id)
    token = issuer.issue(call, principal="alice", resource="O1", policy_version=Policy()())
    verifier.verify(token, call, principal="alice", resource="O1")
    return token


def test_expired_nonces_are_purged_every_n_consumes_and_live_ones_kept(keys: tuple[bytes, bytes]) -> None:
    store = CountingStore()
    issuer, verifier, clock = _setup(keys, store, every=3, interval_s=3600, margin_s=10)
    _use(issuer, verifier, "old1")
    _use(issuer, verifier, "old2")
    clock.now += 60 + 10 + 1  # both grants expired, and past the margin
    _use(issuer, verifier, "new1")  # third consume: purge
    assert store.purges == [clock.now - 10]
    assert store.nonces() == 1
    assert verifier.purger.purged == 2


def test_nothing_is_purged_between_purges(keys: tuple[bytes, bytes]) -> None:
    store = CountingStore()
    issuer, verifier, clock = _setup(keys, store, every=100, interval_s=3600)
    for number in range(5):
        _use(issuer, verifier, f"c{number}")
        clock.now += 120
    assert store.purges == []
    assert store.nonces() == 5


def test_the_interval_purges_even_when_consumes_are_rare(keys: tuple[bytes, bytes]) -> None:
    store = CountingStore()
    issuer, verifier, clock = _setup(keys, store, every=1000, interval_s=30, margin_s=0)
    _use(issuer, verifier, "a")
    clock.now += 61
    _use(issuer, verifier, "b")
    assert len(store.purges) == 1 and store.nonces() == 1


def test_a_nonce_within_the_clock_margin_is_kept(keys: tuple[bytes, bytes]) -> None:
    """Another process sharing the store may run behind: keep nonces ``margin_s`` past their expiry."""
    store = CountingStore()
    issuer, verifier, clock = _setup(keys, store, every=1, interval_s=3600, margin_s=300)
    _use(issuer, verifier, "a")
    clock.now += 61
    _use(issuer, verifier, "b")
    assert store.nonces() == 2


def test_a_grant_whose_nonce_was_purged_is_still_refused(keys: tuple[bytes, bytes]) -> None:
    """Replaying after the purge fails as expired: the nonce is only forgotten once it cannot matter."""
    store = CountingStore()
    issuer, verifier, clock = _setup(keys, store, every=1, interval_s=3600, margin_s=0)
    token = _use(issuer, verifier, "a")
    clock.now += 61
    _use(issuer, verifier, "b")
    assert store.nonces() == 1
    with pytest.raises(GrantError) as info:
        verifier.verify(token, refund_call("a"), principal="alice", resource="O1")
    assert info.value.reason == "expired"


def test_a_failing_purge_does_not_fail_the_verification(keys: tuple[bytes, bytes]) -> None:
    store = CountingStore(fail=True)
    issuer, verifier, _ = _setup(keys, store, every=1)
    _use(issuer, verifier, "a")
    assert verifier.purger.last_error == "OSError: disk I/O error"
    with pytest.raises(GrantError):  # and the nonce it consumed still counts
        _use_again(issuer, verifier)


def _use_again(issuer: GrantIssuer, verifier: GrantVerifier) -> None:
    call = refund_call("a")
    token = issuer.issue(call, principal="alice", resource="O1", policy_version=Policy()())
    verifier.verify(token, call, principal="alice", resource="O1")
    verifier.verify(token, call, principal="alice", resource="O1")


def test_the_default_verifier_purges_its_own_store(keys: tuple[bytes, bytes]) -> None:
    store = SQLiteStore()
    verifier = GrantVerifier(keys[1], nonces=store, current_policy_version=Policy())
    assert verifier.purger.store is store
    assert (verifier.purger.every, verifier.purger.interval_s) == (1000, 60.0)
    store.close()


@pytest.mark.parametrize("bad", [{"every": 0}, {"interval_s": 0}, {"margin_s": -1}])
def test_nonsense_purge_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        NoncePurger(SQLiteStore(), **bad)  # type: ignore[arg-type]


def test_the_executor_purges_on_every_store_path(rig: Any) -> None:
    """Spent through the executor (one transaction, group commit, or separate calls), nonces are still forgotten."""
    rig.verifier.purger = NoncePurger(rig.store, clock=rig.clock, every=2, interval_s=3600, margin_s=0)
    first = rig.call("p1", amount=10)
    assert rig.executor.execute(first, rig.grant(first), principal="alice", resource="O1").executed
    rig.clock.now += 121  # the first grant expired
    second = rig.call("p2", amount=10)
    assert rig.executor.execute(second, rig.grant(second), principal="alice", resource="O1").executed
    assert rig.verifier.purger.purged == 1
    replay = rig.executor.execute(first, rig.grant(first), principal="alice", resource="O1")
    assert not replay.executed  # a fresh grant for an already-run key: the ledger, not the nonce, refuses
