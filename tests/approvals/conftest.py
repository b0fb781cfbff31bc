"""A guard with an approval queue, a grant-checking executor and one refund tool, on a clock the test moves.

The checklist: ``issue_refund`` moves money (threshold 500, ceiling 5000); the
order must be a known one (``O...``, not approvable); a refund above 500 fails
``effect-approval`` (approvable by definition) and ``refund.reason_given``
(marked approvable) fails when no reason is given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from policyguard.approvals.flow import QueueApprovals
from policyguard.approvals.queue import SQLiteApprovalQueue
from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.enforcement.executor import ExecutionResult, GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.gate.hardgate import HardGate
from policyguard.guard.core import Guard
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

KEYS = generate_keypair()
POLICY = (
    "Refunds go only to known orders (ids start with O). "
    "A refund above 500 needs a supervisor's approval. Every refund states a reason.\n"
)
PRINCIPAL = "agent-1"


def checklist_data(reason_text: str = "The refund must state a reason.") -> dict[str, Any]:
    return {
        "policy": {"name": "refunds", "version": policy_version(POLICY)},
        "tools": {
            "get_order": {"mutating": False},
            "issue_refund": {
                "effect": {"transaction_arg": "order_id", "ceiling": 5000, "approval_threshold": 500},
                "requirements": [
                    {
                        "id": "refund.known_order",
                        "text": "The order must be a known order.",
                        "kind": "data",
                        "source": "Refunds go only to known orders (ids start with O).",
                        "check": 'args.order_id.startsWith("O")',
                    },
                    {
                        "id": "refund.reason_given",
                        "text": reason_text,
                        "kind": "data",
                        "source": "Every refund states a reason.",
                        "check": 'has(args.reason) && args.reason != ""',
                        "approvable": True,
                    },
                ],
            },
        },
    }


CHECKLIST = Checklist.model_validate(checklist_data())


@dataclass
class Clock:
    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@dataclass
class RefundTool:
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, order_id: str, amount: float, idempotency_key: str, **rest: Any) -> dict[str, Any]:
        self.calls.append({"order_id": order_id, "amount": amount, "idempotency_key": idempotency_key, **rest})
        return {"status": "issued", "order_id": order_id, "amount": amount}


def refund_call(call_id: str, *, order: str = "O1", amount: float = 800, **extra: Any) -> ToolCall:
    arguments: dict[str, Any] = {
        "order_id": order,
        "amount": amount,
        "idempotency_key": f"refund:{order}",
        "reason": "damaged",
    }
    arguments.update(extra)
    return ToolCall(id=call_id, name="issue_refund", arguments={k: v for k, v in arguments.items() if v is not None})


def dialogue(call: ToolCall, before: Trajectory | None = None) -> Trajectory:
    """The dialogue as the agent's loop hands it over: the user's request, then the pending call."""
    messages = list(before.messages) if before is not None else [Message(role="user", content="Refund my order.")]
    messages.append(Message(role="assistant", tool_calls=[call]))
    return Trajectory(messages=messages)


@dataclass
class Rig:
    store: SQLiteStore
    queue: SQLiteApprovalQueue
    guard: Guard
    executor: GuardedExecutor
    issuer: GrantIssuer
    clock: Clock
    refund: RefundTool
    trace: Trace
    path: Path
    history: Trajectory | None = None

    def check(self, call: ToolCall, guard: Guard | None = None) -> Decision:
        """The guard's decision; the call and its answer join the dialogue, as an agent loop would add them."""
        trajectory = dialogue(call, self.history)
        decision = (guard or self.guard).check(call, trajectory)
        answer = decision.message if not decision.allowed else json.dumps({"status": "issued"})
        trajectory.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=answer))
        self.history = trajectory
        return decision

    def run(self, call: ToolCall, grant: str | None, principal: str | None = PRINCIPAL) -> ExecutionResult:
        return self.executor.execute(call, grant, principal=principal, resource=None)

    def attempt(self, call: ToolCall) -> tuple[Decision, ExecutionResult | None]:
        decision = self.check(call)
        if not decision.allowed:
            return decision, None
        return decision, self.run(call, decision.grant)

    def guard_with(self, **changes: Any) -> Guard:
        settings: dict[str, Any] = {
            "gate": HardGate(CHECKLIST),
            "allow_unverified": True,
            "trace": self.trace,
            "principal": PRINCIPAL,
            "grants": self.issuer,
            "denials": self.store,
            "approvals": self.queue,
        }
        settings.update(changes)
        checklist = settings.pop("checklist", CHECKLIST)
        if "gate" not in changes:
            settings["gate"] = HardGate(checklist)
        return Guard(checklist, POLICY, **settings)


def make_rig(path: Path, *, approval_ttl_s: float = 3600.0) -> Rig:
    clock = Clock()
    store = SQLiteStore(str(path), clock=clock)
    queue = SQLiteApprovalQueue(store, clock=clock)
    private_pem, public_pem = KEYS
    issuer = GrantIssuer(private_pem, ttl_s=120, clock=clock)
    verifier = GrantVerifier(
        public_pem, nonces=store, current_policy_version=lambda: CHECKLIST.policy.version, clock=clock
    )
    refund = RefundTool()
    trace = Trace()
    guard = Guard(
        CHECKLIST,
        POLICY,
        gate=HardGate(CHECKLIST),
        allow_unverified=True,
        trace=trace,
        principal=PRINCIPAL,
        grants=issuer,
        denials=store,
        approvals=queue,
        approval_ttl_s=approval_ttl_s,
    )
    executor = GuardedExecutor(
        {"issue_refund": refund},
        verifier=verifier,
        ledger=store,
        checklist=CHECKLIST,
        trace=trace,
        approvals=QueueApprovals(queue, CHECKLIST),
    )
    for order in ("O1", "O2"):
        store.set_captured(order, 5000)
    return Rig(store, queue, guard, executor, issuer, clock, refund, trace, path)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = make_rig(tmp_path / "approvals.db")
    yield made
    made.store.close()
