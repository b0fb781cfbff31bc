"""A grant issuer, verifier and executor around one refund tool, with a clock the test moves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.trajectory.messages import ToolCall

_KEYS = generate_keypair()


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Policy:
    version: str = "sha256:" + "1" * 64

    def __call__(self) -> str:
        return self.version


@dataclass
class RefundTool:
    """Counts invocations: the ledger of what actually left the building."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, order_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
        self.calls.append({"order_id": order_id, "amount": amount, "idempotency_key": idempotency_key})
        return {"status": "issued", "order_id": order_id, "amount": amount}


@dataclass
class Rig:
    issuer: GrantIssuer
    verifier: GrantVerifier
    executor: GuardedExecutor
    store: SQLiteStore
    clock: Clock
    policy: Policy
    refund: RefundTool
    trace: Trace

    @staticmethod
    def call(call_id: str = "c1", *, order: str = "O1", amount: float = 50, key: str | None = None) -> ToolCall:
        return refund_call(call_id, order=order, amount=amount, key=key)

    def grant(self, call: ToolCall, *, principal: str = "alice", resource: str = "O1", **kw: Any) -> str:
        return self.issuer.issue(call, principal=principal, resource=resource, policy_version=self.policy(), **kw)


def refund_call(call_id: str = "c1", *, order: str = "O1", amount: float = 50, key: str | None = None) -> ToolCall:
    return ToolCall(
        id=call_id,
        name="issue_refund",
        arguments={"order_id": order, "amount": amount, "idempotency_key": key or f"key-{call_id}"},
    )


CHECKLIST = Checklist.model_validate(
    {
        "policy": {"name": "refunds", "version": "sha256:" + "1" * 64},
        "tools": {
            "issue_refund": {
                "effect": {"transaction_arg": "order_id", "resource_arg": "order_id", "ceiling": 1000},
            },
            "get_order": {"mutating": False},
        },
    }
)


def make_rig(store: SQLiteStore) -> Rig:
    clock, policy, refund, trace = Clock(), Policy(), RefundTool(), Trace()
    private_pem, public_pem = _KEYS
    issuer = GrantIssuer(private_pem, ttl_s=120, clock=clock)
    verifier = GrantVerifier(public_pem, nonces=store, current_policy_version=policy, clock=clock)
    executor = GuardedExecutor(
        {"issue_refund": refund, "get_order": lambda order_id: {"order_id": order_id}},
        verifier=verifier,
        ledger=store,
        checklist=CHECKLIST,
        trace=trace,
    )
    store.set_captured("O1", 100)
    store.set_captured("O2", 100)
    return Rig(issuer, verifier, executor, store, clock, policy, refund, trace)


@pytest.fixture
def keys() -> tuple[bytes, bytes]:
    return _KEYS


class SeparateCallsStore(SQLiteStore):
    """A store without the optional SpendAndClaim capability: the executor's fallback path."""

    spend_and_claim = None  # type: ignore[assignment]


def open_store(kind: str, tmp_path: Path) -> SQLiteStore:
    """``memory``; ``group``: a file with group commit (``deferred``: and deferred completions);
    ``separate``: no combined spend-and-claim."""
    if kind == "memory":
        return SQLiteStore()
    if kind == "group":
        return SQLiteStore(str(tmp_path / "group.db"), synchronous="NORMAL", group_commit=True)
    if kind == "deferred":
        return SQLiteStore(str(tmp_path / "d.db"), synchronous="NORMAL", group_commit=True, defer_completion=True)
    return SeparateCallsStore(str(tmp_path / "separate.db"), synchronous="NORMAL")


@pytest.fixture(params=["memory", "group", "deferred", "separate"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    """Every grant and executor rule holds on each store path: one transaction, group commit, separate calls."""
    store = open_store(request.param, tmp_path)
    yield make_rig(store)
    store.close()


@pytest.fixture
def file_rig(tmp_path: Path) -> Iterator[Rig]:
    store = SQLiteStore(str(tmp_path / "gate.db"), synchronous="NORMAL")
    yield make_rig(store)
    store.close()


@pytest.fixture
def rig_for() -> Callable[[SQLiteStore], Rig]:
    """Build a rig on a store the test chose."""
    return make_rig
