"""The scripted refund agent and the two targets it runs against.

The agent is the one of "Why Agents Refund When Policy Says No" on purpose: it reads the refund policy (and the
approval a customer quotes) and then calls ``issue_refund`` whatever it read.
The targets differ only in what stands between that call and the money:

* ``buggy`` sends the call straight to the payment service; on a timeout it
  re-sends the same request (same key), whether or not the first one committed;
* ``fixed`` sends it through PolicyGuard: the hard gate checks the call against
  facts re-read from the sandbox (never from the request text), an allow comes
  with a call-bound grant, and the verdict-gated executor claims the
  idempotency key in its SQLite ledger before the service sees the request. On
  an unknown outcome it looks the key up at the service before anything else:
  a committed refund is recorded, never re-sent; a request that never arrived
  is released and retried under the same key.
* ``approval`` is ``fixed`` with an approval queue: a large refund with no
  approval is escalated to a supervisor instead of refused; the scripted
  supervisor decides (the sample's ``review``), and the agent's unchanged
  retry after an approval refunds exactly once under a grant bound to it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from policyguard.audit.trace import Trace
from policyguard.errors import ConfigError
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .sandbox import PaymentSandbox, RefundRow, SandboxResolver, TransportError
from .spec import DecisionKind, LoadedEval, Review, Sample

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalQueue
    from policyguard.enforcement.store import Store

AttemptOutcome = Literal[
    "executed", "blocked", "escalated", "refused", "transport_error", "recovered_by_lookup", "from_ledger"
]
SUPERVISOR = "supervisor-bench"
POLICY_REQUIREMENT = "refund.policy_allows"
MAX_ATTEMPTS = 3


class RefundAttempt(BaseModel):
    """One refund request the agent (or the infra under it) made, and what became of it."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    arguments: dict[str, Any]
    outcome: AttemptOutcome
    reached_tool: bool = Field(description="Whether the request was handed to the refund tool.")
    detail: str | None = None
    approval_id: str | None = Field(default=None, description="The approval request it waited for or spent.")
    after_approval_s: float | None = Field(
        default=None, description="Seconds from the supervisor's approval to this executed call (target approval)."
    )


class ToolReply(BaseModel):
    """What the agent sees as the refund tool's result."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    blocked: bool = False
    content: str
    approval_id: str | None = Field(default=None, description="Set when the call waits for a supervisor.")


class AgentRun(BaseModel):
    """The agent's side of one trial: its decision, its reads and its refund attempts."""

    model_config = ConfigDict(extra="forbid")

    decision: DecisionKind | None
    reply: str
    reads: list[str]
    attempts: list[RefundAttempt]
    error: str | None = None


class Target(Protocol):
    id: str

    def read(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]: ...

    def refund(self, call: ToolCall, trajectory: Trajectory, attempts: list[RefundAttempt]) -> ToolReply: ...


def _read_endpoint(sandbox: PaymentSandbox, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if tool == "get_refund_policy":
        return sandbox.get_refund_policy(str(arguments["transaction_id"]))
    if tool == "get_approval":
        return sandbox.get_approval(str(arguments["approval_id"]))
    if tool == "get_transaction":
        return sandbox.get_transaction(str(arguments["transaction_id"]))
    if tool == "escalate_to_human":
        return {"status": "queued", "transaction_id": arguments.get("transaction_id")}
    raise ConfigError(f"unknown read tool {tool!r}")


def run_agent(sample: Sample, target: Target, call_prefix: str) -> AgentRun:
    """The scripted agent: read the policy (and quoted approval), then always ask for the refund."""
    trajectory = Trajectory(messages=[Message(role="user", content=sample.request)])
    reads: list[str] = []

    def read(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        call = ToolCall(id=f"{call_prefix}.{tool}", name=tool, arguments=arguments)
        trajectory.append(Message(role="assistant", tool_calls=[call]))
        result = target.read(tool, arguments)
        trajectory.append(Message(role="tool", tool_call_id=call.id, name=tool, content=json.dumps(result)))
        reads.append(tool)
        return result

    read("get_refund_policy", {"transaction_id": sample.transaction_id})
    if sample.approval_id:
        read("get_approval", {"approval_id": sample.approval_id})
    arguments: dict[str, Any] = {
        "transaction_id": sample.transaction_id,
        "amount": sample.amount,
        "currency": sample.currency,
        "idempotency_key": f"refund:{sample.transaction_id}",
    }
    if sample.approval_id:
        arguments["approval_id"] = sample.approval_id
    call = ToolCall(id=f"{call_prefix}.refund", name="issue_refund", arguments=arguments)
    trajectory.append(Message(role="assistant", tool_calls=[call]))
    attempts: list[RefundAttempt] = []
    reply = target.refund(call, trajectory, attempts)
    trajectory.append(
        Message(role="tool", tool_call_id=call.id, name=call.name, content=reply.content, is_error=not reply.ok)
    )
    if reply.ok:
        return AgentRun(decision="refund", reply="Your refund was issued.", reads=reads, attempts=attempts)
    if reply.blocked and POLICY_REQUIREMENT in reply.content:
        return AgentRun(decision="refuse", reply="This transaction cannot be refunded.", reads=reads, attempts=attempts)
    if reply.blocked:
        read("escalate_to_human", {"transaction_id": sample.transaction_id, "reason": reply.content[:200]})
        return AgentRun(
            decision="escalate", reply="A human agent will review your request.", reads=reads, attempts=attempts
        )
    return AgentRun(decision=None, reply="", reads=reads, attempts=attempts, error=reply.content)


class BuggyTarget:
    """No guard: the call goes straight to the service; timeouts are re-sent blindly."""

    id = "buggy"

    def __init__(self, sandbox: PaymentSandbox, trace: Trace) -> None:
        self.sandbox = sandbox
        self.trace = trace

    def read(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return _read_endpoint(self.sandbox, tool, arguments)

    def refund(self, call: ToolCall, trajectory: Trajectory, attempts: list[RefundAttempt]) -> ToolReply:
        ids = {"call_id": call.id, "tool": call.name, "args_sha256": call.args_sha256}
        self.trace.emit("submit", **ids)
        error = "no attempt made"
        for _ in range(MAX_ATTEMPTS):
            self.trace.emit("execute", **ids)
            seen = len(self.sandbox.rows)
            try:
                result = self.sandbox.issue_refund(**call.arguments)
            except TransportError as exc:
                error = str(exc)
                attempts.append(_attempt(call, "transport_error", True, error))
                continue
            finally:  # the trace records what the ledger did, whatever the caller saw
                for row in self.sandbox.rows[seen:]:
                    self.trace.emit("effect", **ids, **_effect_fields(row))
            attempts.append(_attempt(call, "executed", True))
            return ToolReply(ok=True, content=json.dumps(result))
        return ToolReply(ok=False, content=f"refund failed: {error}")


class FixedTarget:
    """The same calls through PolicyGuard: gate -> grant -> verdict-gated executor -> ledger."""

    id = "fixed"

    def __init__(
        self,
        loaded: LoadedEval,
        sandbox: PaymentSandbox,
        trace: Trace,
        *,
        clock: Callable[[], float] = time.time,
        grant_ttl_s: int = 120,
        keypair: tuple[bytes, bytes] | None = None,
        store: Store | None = None,
        approvals: ApprovalQueue | None = None,
        principal: str | None = None,
    ) -> None:
        from policyguard.approvals.flow import AnyApproval, QueueApprovals
        from policyguard.enforcement.approvalcheck import ApprovalCheck, RecordApprovals
        from policyguard.enforcement.executor import GuardedExecutor
        from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
        from policyguard.enforcement.store import SQLiteStore
        from policyguard.gate.hardgate import HardGate
        from policyguard.guard.core import Guard

        checklist = loaded.checklist
        unchecked = [r.id for r in checklist.requirements_for("issue_refund") if r.check is None]
        if unchecked:  # the guard runs gate-only: nothing may be left for a verifier model
            raise ConfigError(f"refund requirements without a deterministic check: {unchecked}")
        self.sandbox = sandbox
        self.trace = trace
        self.principal = principal
        self.policy_version = checklist.policy.version
        self.store: Store = store if store is not None else SQLiteStore(":memory:", clock=clock)
        for transaction_id, transaction in loaded.dataset.transactions.items():
            self.store.set_captured(transaction_id, transaction.captured)
        private_pem, public_pem = keypair or generate_keypair()
        self.issuer = GrantIssuer(private_pem, ttl_s=grant_ttl_s, clock=clock)
        self.verifier = GrantVerifier(
            public_pem, nonces=self.store, current_policy_version=lambda: self.policy_version, clock=clock
        )
        self.resolver = SandboxResolver(sandbox)
        self.guard = Guard(
            checklist,
            loaded.policy_text,
            gate=HardGate(checklist, self.resolver),
            verifier=None,
            allow_unverified=True,
            trace=trace,
            grants=self.issuer,
            denials=self.store,
            approvals=approvals,
            principal=principal,
        )
        approval_check: ApprovalCheck = RecordApprovals(sandbox.get_approval)
        if approvals is not None:  # a quoted approval record, or a supervisor's approval of this very call
            approval_check = AnyApproval(approval_check, QueueApprovals(approvals, checklist))
        self.executor = GuardedExecutor(
            {"issue_refund": sandbox.issue_refund},
            verifier=self.verifier,
            ledger=self.store,
            checklist=checklist,
            trace=trace,
            approvals=approval_check,
        )

    def read(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return _read_endpoint(self.sandbox, tool, arguments)

    def refund(self, call: ToolCall, trajectory: Trajectory, attempts: list[RefundAttempt]) -> ToolReply:
        key = str(call.arguments.get("idempotency_key", ""))
        current = call
        for number in range(1, MAX_ATTEMPTS + 1):
            decision = self.guard.check(current, trajectory)
            if not decision.allowed:
                message = decision.message or "blocked"
                waiting = decision.approval_id if decision.awaiting_approval else None
                attempts.append(_attempt(current, "escalated" if waiting else "blocked", False, message, waiting))
                return ToolReply(ok=False, blocked=True, content=message, approval_id=waiting)
            result = self.executor.execute(current, decision.grant, principal=self.principal, resource=None)
            if result.executed and result.error is None:
                attempts.append(_attempt(current, "executed", True, approval_id=decision.approval_id))
                return ToolReply(ok=True, content=json.dumps(result.result))
            if result.replayed_from_ledger:
                attempts.append(_attempt(current, "from_ledger", False, result.reason))
                return ToolReply(ok=True, content=json.dumps(result.result))
            if not result.executed:
                attempts.append(_attempt(current, "refused", False, result.error))
                return ToolReply(ok=False, blocked=True, content=f"refused by the executor: {result.error}")
            # The tool ran but its outcome is unknown: look the key up before anything else.
            attempts.append(_attempt(current, "transport_error", True, result.error))
            found = self.sandbox.lookup(key)
            if found is not None:
                self.store.complete_effect(key, json.dumps(found))
                self.trace.emit(
                    "effect",
                    call_id=current.id,
                    tool=current.name,
                    args_sha256=current.args_sha256,
                    idempotency_key=key,
                    recovered_by="lookup",
                    **({"place": decision.place} if decision.place else {}),  # the execute's place, from its grant
                )
                attempts.append(_attempt(current, "recovered_by_lookup", False, "committed: found by key"))
                return ToolReply(ok=True, content=json.dumps(found))
            self.store.release_pending(key)  # the service has no refund under this key: safe to retry
            current = current.model_copy(update={"id": f"{call.id}.retry{number}"})
        return ToolReply(ok=False, content="refund failed: the payment service did not answer")


class ApprovalTarget(FixedTarget):
    """``fixed`` with an approval queue and a scripted supervisor who decides as the sample's ``review`` says."""

    id = "approval"

    def __init__(
        self,
        loaded: LoadedEval,
        sandbox: PaymentSandbox,
        trace: Trace,
        *,
        queue: ApprovalQueue,
        principal: str,
        review: Review | None,
        clock: Callable[[], float] = time.time,
        keypair: tuple[bytes, bytes] | None = None,
    ) -> None:
        super().__init__(loaded, sandbox, trace, clock=clock, keypair=keypair, approvals=queue, principal=principal)
        self.queue = queue
        self.review = review

    def refund(self, call: ToolCall, trajectory: Trajectory, attempts: list[RefundAttempt]) -> ToolReply:
        from policyguard.approvals.flow import decide

        reply = super().refund(call, trajectory, attempts)
        if reply.approval_id is None or self.review is None:
            return reply
        decide(self.queue, reply.approval_id, self.review, SUPERVISOR, f"bench review: {self.review}", trace=self.trace)
        decided = time.perf_counter()
        # The agent was told to wait and not to change the call: it retries the same call, with a new id.
        trajectory.append(
            Message(role="tool", tool_call_id=call.id, name=call.name, content=reply.content, is_error=True)
        )
        retry = call.model_copy(update={"id": f"{call.id}.after-review"})
        trajectory.append(Message(role="assistant", tool_calls=[retry]))
        before = len(attempts)
        final = super().refund(retry, trajectory, attempts)
        for attempt in attempts[before:]:
            if attempt.outcome == "executed":
                attempt.after_approval_s = round(time.perf_counter() - decided, 6)
        return final


def _effect_fields(row: RefundRow) -> dict[str, Any]:
    return {
        "idempotency_key": row.idempotency_key,
        "amount": row.amount,
        "transaction_id": row.transaction_id,
        "refund_seq": row.seq,
    }


def _attempt(
    call: ToolCall, outcome: AttemptOutcome, reached: bool, detail: str | None = None, approval_id: str | None = None
) -> RefundAttempt:
    return RefundAttempt(
        call_id=call.id,
        arguments=dict(call.arguments),
        outcome=outcome,
        reached_tool=reached,
        detail=detail,
        approval_id=approval_id,
    )
