"""Escalation to a person: the guard's approval queue (``approvals=``) decides a block a person may lift.

A reviewer's approval for exactly this call (same principal, same policy
version, :func:`policyguard.approvals.flow.matching`) is spent once and allows
the call; a reviewer's deny is final; otherwise the call waits, as a new or
the already pending request. A queue that cannot be reached approves nothing
and queues nothing: the call is blocked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from policyguard.decision import Decision
from policyguard.trajectory.messages import ToolCall, Trajectory

from .calls import hashed_ids
from .denials import DenyWins
from .granter import CallGranter
from .recorder import Recorder, traced
from .remediation import APPROVAL_UNAVAILABLE
from .settings import GuardSettings

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalRequest


class PersonApprover:
    """The guard's :class:`~policyguard.stages.Approver`, over its approval queue."""

    __slots__ = ("settings", "recorder", "denials", "granter")

    def __init__(self, settings: GuardSettings, recorder: Recorder, denials: DenyWins, granter: CallGranter) -> None:
        self.settings = settings
        self.recorder = recorder
        self.denials = denials
        self.granter = granter

    def ask(
        self,
        call: ToolCall,
        trajectory: Trajectory,
        decision: Decision,
        *,
        args_sha256: str,
        session_id: str | None,
        place: str = "",
    ) -> Decision:
        """Spend an approval a reviewer gave for exactly this call, or wait for one (see approvals.flow)."""
        from policyguard.approvals.flow import (
            NO_PRINCIPAL_MESSAGE,
            approval_principal,
            approval_version,
            denied_message,
            matching,
            new_request,
            waiting_message,
        )

        settings = self.settings
        queue, ttl_s = settings.approvals, settings.approval_ttl_s
        assert queue is not None
        ids = hashed_ids(call, args_sha256)
        carried: dict[str, Any] = {
            "requirements": decision.requirements,
            "usage": decision.usage,
            "resolver_reads": decision.resolver_reads,
            **ids,
        }
        try:
            principal = approval_principal(settings.checklist, trajectory, settings.principal)
            if principal is None:  # no user to approve for: None == None is not the same user
                return Decision.block("approver", NO_PRINCIPAL_MESSAGE, error="no authenticated principal", **carried)
            found = matching(queue, call, principal=principal, version=approval_version(settings.checklist))
            denied = [r for r in found if r.status == "denied"]
            if denied:  # deny is final for this call
                return Decision.block(
                    "approver",
                    denied_message(denied[-1]),
                    approval_id=denied[-1].id,
                    error=f"denied by reviewer {denied[-1].reviewer}",
                    **carried,
                )
            for request in found:
                if request.status == "approved":
                    spent = self._spend(call, request, carried, session_id, place)
                    if spent is not None:
                        return spent
            waiting = [r for r in found if r.status == "pending"]
            request = (
                waiting[0]
                if waiting
                else queue.submit(
                    new_request(settings.checklist, call, decision, trajectory, principal=principal, ttl_s=ttl_s)
                )
            )
        except Exception as exc:  # an unreachable queue approves nothing and queues nothing
            return Decision.block(
                "approver", APPROVAL_UNAVAILABLE, error=f"approval queue: {type(exc).__name__}: {exc}", **carried
            )
        self.recorder.emit(
            "escalate",
            **traced(ids, session_id),
            approval_id=request.id,
            policy_version=request.policy_version,
            principal=request.principal,
            expires_at=request.expires_at,
            new=not waiting,
        )
        return Decision.await_approval(request.id, waiting_message(request.id), **carried)

    def _spend(
        self, call: ToolCall, request: ApprovalRequest, carried: dict[str, Any], session_id: str | None, place: str
    ) -> Decision | None:
        """Allow ``call`` on ``request``'s approval, once; None when another check spent it first."""
        from policyguard.approvals.flow import event_fields
        from policyguard.approvals.queue import ApprovalError
        from policyguard.trajectory.canonical import sha256_hex

        allow = Decision.allow("approver", approval_id=request.id, **carried)
        checked = self.denials.check(call, allow, session_id, place)
        if checked.outcome != "allow":
            return checked.model_copy(update={"requirements": carried["requirements"]})
        token = self.granter.for_approval(call, request, place)
        queue = self.settings.approvals
        assert queue is not None
        try:
            used = queue.use(request.id, call.id, sha256_hex(token) if token is not None else None)
        except ApprovalError:
            return None
        self.recorder.emit("approve", **event_fields(used), by="guard", used_by_call_id=call.id)
        return allow.model_copy(update={"grant": token})
