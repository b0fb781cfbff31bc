"""Shadow mode: run a rule on live traffic without letting it block, and record what it would have blocked.

A requirement with ``mode: shadow`` (or every checklist requirement, under
``Guard(mode="shadow")``) still gets judged; when such requirements are the only
reason a call would be blocked, the call is allowed and the decision lists them
in ``shadow_blocked``. What shadow mode never lifts, so fail-closed holds:

* errors (``gate_error``, ``verifier_error``, a check that could not be evaluated);
* a NOT_MET the gate reached because evidence is missing (a fact, the principal,
  a prerequisite read): only a check that ran and was false is shadowed;
* a requirement nobody judged when unverified requirements are not allowed;
* the money rules of a tool's ``effect:`` (ceiling, approval threshold, the
  idempotency key) and every front refusal (unknown tool, bad call, reused id):
  their ids are not checklist requirements, so they always enforce.
"""

from __future__ import annotations

from typing import Literal

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision

GuardMode = Literal["enforce", "shadow"]


def shadowed_ids(checklist: Checklist, tool: str, mode: GuardMode) -> set[str]:
    """The ids of ``tool``'s requirements that only record, never block."""
    requirements = checklist.requirements_for(tool)
    return {r.id for r in requirements if mode == "shadow" or r.mode == "shadow"}


def would_block(decision: Decision, shadowed: set[str], *, allow_unverified: bool) -> list[str]:
    """The shadowed requirements that alone block ``decision`` (then it may run); empty when the block stands."""
    if decision.outcome != "block" or decision.stage not in ("gate", "verifier") or decision.error:
        return []
    failing = [r for r in decision.requirements if r.status == "NOT_MET"]
    for result in failing:
        if result.id not in shadowed:
            return []
        if result.judged_by == "gate" and not (result.evidence or "").startswith("check is false"):
            return []  # missing evidence is no judgement: it blocks whatever the mode
    unjudged = [r for r in decision.requirements if r.status == "UNVERIFIED" and r.id not in shadowed]
    if unjudged and not allow_unverified:
        return []
    return [r.id for r in failing]


def lifted(decision: Decision, blocked: list[str]) -> Decision:
    """The allow that stands in for a block only shadowed requirements made."""
    warning = f"shadow mode: {', '.join(blocked)} would have blocked this call; it was allowed"
    return decision.model_copy(
        update={
            "outcome": "allow",
            "verdict": "PASS",
            "message": None,
            "shadow_blocked": blocked,
            "warnings": [*decision.warnings, warning],
        }
    )


def shadowed_checklist(checklist: Checklist) -> Checklist:
    """A copy of ``checklist`` with every requirement in shadow mode (its version says so).

    For a host that builds its guards from a checklist it was given (``serve``):
    the same effect as ``Guard(mode="shadow")``.
    """
    copy = checklist.model_copy(deep=True)
    for requirement in [r for spec in copy.tools.values() for r in spec.requirements] + copy.general_rules:
        requirement.mode = "shadow"
    copy.__dict__.pop("version", None)  # a cached version is the original's
    copy._source = checklist.source
    return copy
