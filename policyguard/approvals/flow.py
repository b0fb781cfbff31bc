"""Escalate to a person: which failures a person may approve, and how a yes reaches the executor.

1. **Escalate.** When a mutating call fails only *approvable* requirements (a
   requirement marked ``approvable: true``, or the ``effect-approval`` of a
   money tool's ``approval_threshold``), a guard built with ``approvals=queue``
   records an :class:`~policyguard.approvals.queue.ApprovalRequest` and returns
   :meth:`Decision.await_approval <policyguard.decision.Decision.await_approval>`:
   the agent is told to wait and not to retry with other arguments.
2. **Decide.** A reviewer approves or denies (:func:`decide`; the
   ``policyguard approvals`` CLI). Nothing is signed yet: the decision is a
   record in the store.
   The request records the principal the gate established (the integrator's
   ``principal=``, else the checklist's lookup in the dialogue); with no
   authenticated user there is nothing a person could approve for, so the call
   stays blocked and nothing is queued.
3. **Retry.** The same call (same tool, same argument hash, same principal,
   same policy and checklist version; resumed with its own call id or retried
   with a new one) checked again while the approval is unexpired is allowed
   *once*: the guard atomically marks the request ``used``
   by this call id and signs a grant for exactly this call (single-use nonce,
   ``approval_id`` claim, expiry no later than the approval's), keeping only its
   sha256 in the queue. The executor honours it like any grant and, above a
   money tool's threshold, asks :class:`QueueApprovals` whether the queue holds
   an approval spent on this very call. Other arguments, another principal, a
   new policy or checklist version, an expired or used approval find no
   approval and escalate again; a denied one blocks for good.

The requirements that did not fail are still checked on every retry, with
facts read again: an approval waives only what the reviewer saw fail.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.enforcement.approvalcheck import ApprovalCheck, MoneyEffect
from policyguard.gate.facts import resolve_principal
from policyguard.trajectory.canonical import canonical_json, sha256_hex
from policyguard.trajectory.messages import ToolCall, Trajectory

from .queue import ApprovalQueue, ApprovalRequest, DialogueLine, RequirementView

EFFECT_APPROVAL = "effect-approval"
"""The requirement id the guard records when an amount is above the tool's ``approval_threshold``."""

EXCERPT_MESSAGES = 12
EXCERPT_CHARS = 600


NO_PRINCIPAL_MESSAGE = (
    "This action needs a supervisor's approval, but no user is authenticated, so it cannot be approved and was "
    "not performed. Identify the user first; a supervisor can then approve the call for that user."
)


def waiting_message(request_id: str) -> str:
    """What the agent is told while its call waits for a person."""
    return (
        f"This action is waiting for a supervisor's approval (request {request_id}), so it was not performed. "
        "Do not retry it with other arguments. Tell the user that a supervisor must approve it; once approved, "
        "the same call can be made again."
    )


def denied_message(request: ApprovalRequest) -> str:
    """What the agent is told when a person denied this call."""
    why = f": {request.reason}" if request.reason else ""
    return (
        f"A supervisor denied this action (request {request.id}){why}. It will not be performed; "
        "do not retry it. Explain this to the user."
    )


def approval_version(checklist: Checklist) -> str:
    """What an approval is bound to: the policy text's version and the checklist's own version.

    The reviewer approved a call against the requirements this checklist states
    for this policy; a change to either voids the approval.
    """
    return "sha256:" + sha256_hex(f"{checklist.policy.version}\n{checklist.version}")


def is_approvable(checklist: Checklist, tool: str, requirement_id: str) -> bool:
    """Whether a person may approve a failure of ``requirement_id`` for ``tool``."""
    if requirement_id == EFFECT_APPROVAL:
        spec = checklist.tool_spec(tool)
        return spec is not None and spec.effect is not None and spec.effect.approval_threshold is not None
    return any(r.id == requirement_id and r.approvable for r in checklist.requirements_for(tool))


def approvable_failure(checklist: Checklist, decision: Decision, *, allow_unverified: bool) -> bool:
    """True when ``decision`` is a plain block by the gate or the verifier and every failure is approvable.

    A block for any other reason (a check that could not be evaluated, a
    verifier error, an inconsistency, an unknown tool, bad arguments, an amount
    over the ceiling) is not something a person can wave through.
    """
    if decision.outcome != "block" or decision.stage not in ("gate", "verifier"):
        return False
    if decision.error is not None or decision.inconsistency is not None or decision.tool is None:
        return False
    tool = decision.tool
    failed = False
    for result in decision.requirements:
        if result.status == "NOT_MET":
            failed = True
            if not is_approvable(checklist, tool, result.id):
                return False
        elif result.status == "UNVERIFIED" and not allow_unverified and not is_approvable(checklist, tool, result.id):
            return False
    return failed


def excerpt(
    trajectory: Trajectory, *, messages: int = EXCERPT_MESSAGES, chars: int = EXCERPT_CHARS
) -> list[DialogueLine]:
    """The last ``messages`` turns for the reviewer, each shortened to ``chars`` characters."""
    lines: list[DialogueLine] = []
    for message in trajectory.messages[-messages:]:
        parts = [message.content] if message.content else []
        for call in message.tool_calls:
            try:
                arguments = canonical_json(call.arguments)
            except (ValueError, TypeError, RecursionError):
                arguments = "<unreadable arguments>"
            parts.append(f"{call.name}({arguments})")
        text = "\n".join(parts)
        if len(text) > chars:
            text = text[: chars - 1] + "…"
        lines.append(DialogueLine(role=message.role, content=text, name=message.name))
    return lines


def new_request(
    checklist: Checklist,
    call: ToolCall,
    decision: Decision,
    trajectory: Trajectory,
    *,
    principal: str | None,
    ttl_s: float,
    now: float | None = None,
) -> ApprovalRequest:
    """The request a reviewer will see for ``call``: requirements with evidence and quoted policy sentences."""
    created = time.time() if now is None else now
    texts = {r.id: r for r in checklist.requirements_for(call.name)}
    views = []
    for result in decision.requirements:
        requirement = texts.get(result.id)
        views.append(
            RequirementView(
                id=result.id,
                status=result.status,
                evidence=result.evidence,
                judged_by=result.judged_by,
                text=requirement.text if requirement else None,
                source=requirement.source if requirement else None,
                approvable=is_approvable(checklist, call.name, result.id),
            )
        )
    return ApprovalRequest(
        call_id=call.id,
        tool=call.name,
        arguments=dict(call.arguments),
        args_sha256=call.args_sha256,
        principal=principal,
        policy_version=approval_version(checklist),
        requirements=views,
        remediation=decision.message,
        dialogue=excerpt(trajectory),
        created_at=created,
        expires_at=created + ttl_s,
    )


def approval_principal(checklist: Checklist, trajectory: Trajectory, given: str | None) -> str | None:
    """Whose call a person approves: the principal the gate established (the integrator's, else the
    checklist's lookup in the dialogue), or None when no user is authenticated."""
    return resolve_principal(checklist, trajectory, given)


def matching(queue: ApprovalQueue, call: ToolCall, *, principal: str | None, version: str) -> list[ApprovalRequest]:
    """Requests for exactly this call: tool, argument hash, principal and approval version, oldest first.

    An unknown principal matches nothing, not even a request recorded without
    one: two unknown users are not the same user.
    """
    if principal is None:
        return []
    found = queue.all(tool=call.name, args_sha256=call.args_sha256, policy_version=version)
    return [r for r in found if r.principal == principal]


def decide(
    queue: ApprovalQueue,
    request_id: str,
    verdict: Literal["approve", "deny"],
    reviewer: str,
    reason: str | None = None,
    *,
    trace: Trace | None = None,
) -> ApprovalRequest:
    """Record a reviewer's decision (atomic; ApprovalError if not pending) and its trace event.

    ``approve`` and ``deny`` events carry the escalated call's ``call_id``,
    ``tool`` and ``args_sha256``, the ``approval_id``, reviewer and reason. A
    reviewer's ``deny`` is an INV-1 deny for that call id.
    """
    if verdict == "approve":
        done = queue.approve(request_id, reviewer, reason)
    elif verdict == "deny":
        done = queue.deny(request_id, reviewer, reason)
    else:
        raise ValueError(f"verdict must be 'approve' or 'deny', got {verdict!r}")
    if trace is not None:
        trace.emit(verdict, **event_fields(done), by="reviewer")
    return done


def event_fields(request: ApprovalRequest) -> dict[str, object]:
    """The fields ``escalate``, ``approve`` and ``deny`` trace events carry for ``request``."""
    return {
        "call_id": request.call_id,
        "tool": request.tool,
        "args_sha256": request.args_sha256,
        "approval_id": request.id,
        "policy_version": request.policy_version,
        "principal": request.principal,
        "reviewer": request.reviewer,
        "reason": request.reason,
        "decided_at": request.decided_at,
        "expires_at": request.expires_at,
    }


class QueueApprovals:
    """An :class:`~policyguard.enforcement.approvalcheck.ApprovalCheck` for the executor: a person approved
    exactly this call.

    Covers the effect only when the queue holds a request ``used`` by this call
    id, for the same tool, argument hash and current approval version (the
    guard spends the approval when it signs the call's grant). A queue that
    cannot be read approves nothing.
    """

    def __init__(self, queue: ApprovalQueue, checklist: Checklist) -> None:
        self.queue = queue
        self.checklist = checklist

    def __call__(self, call: ToolCall, effect: MoneyEffect) -> str | None:
        version = approval_version(self.checklist)
        try:
            found = self.queue.all(tool=call.name, args_sha256=call.args_sha256, status="used")
        except Exception as exc:  # an unreadable queue approves nothing
            return f"the approval queue could not be read ({type(exc).__name__})"
        for request in found:
            if request.used_call_id == call.id and request.policy_version == version:
                return None
        return "no supervisor approval in the queue was spent on this call"


class AnyApproval:
    """An ApprovalCheck that passes when any of ``checks`` does (e.g. a quoted approval record or the queue)."""

    def __init__(self, *checks: ApprovalCheck) -> None:
        self.checks: Sequence[ApprovalCheck] = checks

    def __call__(self, call: ToolCall, effect: MoneyEffect) -> str | None:
        problems = []
        for check in self.checks:
            try:
                problem = check(call, effect)
            except Exception as exc:
                problem = f"the approval check failed ({type(exc).__name__})"
            if problem is None:
                return None
            problems.append(problem)
        return "; ".join(problems) or "no approval check is configured"
