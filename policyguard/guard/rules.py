"""The rules that combine the stages' decisions into the guard's one decision.

Any block wins; the gate's proven results stand unless the verifier found a
violation the gate did not; a chain that ends on escalate blocks unless the
integrator allowed unverified requirements; a block a person may lift goes to
the approval queue only in strict mode and only when every failure is
approvable; an allow that is weaker than the fail-closed guarantee says so.
"""

from __future__ import annotations

from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision, RequirementResult
from policyguard.stages import Gate, Verifier

from .remediation import NO_VERIFIER_MESSAGE


def may_escalate(
    decision: Decision, checklist: Checklist, *, has_queue: bool, strict: bool, allow_unverified: bool
) -> bool:
    """Whether a person could approve this block: an approval queue, strict mode, only approvable failures."""
    if not has_queue or not strict or decision.outcome != "block":
        return False
    from policyguard.approvals.flow import approvable_failure

    return approvable_failure(checklist, decision, allow_unverified=allow_unverified)


def wants_verifier(first: Decision, *, approvable_block: bool) -> bool:
    """The gate escalated, or it blocked on approvable failures only (``approvable_block``) while
    requirements remain unjudged: an approval must never waive a requirement nobody checked."""
    if first.outcome == "escalate":
        return True
    return approvable_block and any(r.status == "UNVERIFIED" for r in first.requirements)


def without_verifier(first: Decision, ids: dict[str, Any], *, allow_unverified: bool) -> Decision:
    """The final decision when no verifier runs: the first stage's, or the rule for escalations."""
    if first.outcome != "escalate":
        return first
    if allow_unverified:
        return Decision.allow(first.stage, requirements=first.requirements, resolver_reads=first.resolver_reads, **ids)
    return Decision.block(
        "guard",
        NO_VERIFIER_MESSAGE,
        requirements=first.requirements,
        error="no verifier configured for requirements the gate could not prove",
        **ids,
    )


def combine(first: Decision, verifier: Decision) -> Decision:
    """The verifier's judgement joined to the first stage's.

    After a gate escalate this is :func:`merge`. After a gate block that only a
    person may lift, a verifier's PASS keeps the gate's block (with the
    verifier's results and cost added), and a verifier's block is the decision.
    """
    merged = merge(first, verifier)
    if first.outcome == "escalate" or merged.outcome != "allow":
        return merged
    return first.model_copy(
        update={"requirements": merged.requirements, "usage": merged.usage, "resolver_reads": merged.resolver_reads}
    )


def merge(gate: Decision, verifier: Decision) -> Decision:
    """Combine the gate's proven results with the verifier's judgement; deny wins."""
    by_id: dict[str, RequirementResult] = {r.id: r for r in verifier.requirements}
    for result in gate.requirements:
        other = by_id.get(result.id)
        if result.judged_by == "gate" or other is None:
            if other is not None and other.status == "NOT_MET":
                continue  # the verifier found a violation the gate did not: keep it
            by_id[result.id] = result
    return verifier.model_copy(
        update={"requirements": list(by_id.values()), "resolver_reads": gate.resolver_reads + verifier.resolver_reads}
    )


def weakened(decision: Decision, advisory: bool, *, gate: Gate | None, verifier: Verifier | None) -> list[str]:
    """Why this allow is not the fail-closed guarantee: settings the integrator chose, said on every call."""
    if advisory and decision.stage in ("verifier_error", "gate_error"):
        return [
            f"advisory mode (strict=False) allowed this call although its policy check failed ({decision.stage}): "
            "nothing judged it"
        ]
    if advisory:
        return [f"advisory mode (strict=False) allowed this call although the guard blocked it ({decision.stage})"]
    if decision.outcome == "allow" and decision.stage != "read_only" and gate is None and verifier is None:
        return ["no gate and no verifier (use_gate=False, model none): this mutating call was allowed unchecked"]
    if decision.outcome == "allow" and verifier is None and decision.unverified and decision.approval_id is None:
        return [unverified_warning(decision.unverified)]
    return []


def unverified_warning(ids: list[str]) -> str:
    """What gate-only mode did not check, said on the decision that let the call run."""
    return (
        f"not checked, no verifier (model none, on_unverified='allow'): {', '.join(ids)}; "
        "pass a model, or on_unverified='block' to block such calls"
    )
