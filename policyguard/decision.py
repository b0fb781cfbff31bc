"""What a stage decides about one pending call.

Three outcomes are kept apart, each with its own constructor:

* :meth:`Decision.allow` - the call may reach the tool;
* :meth:`Decision.block` - the call is removed and ``message`` goes back to the
  agent as the tool's error result;
* :meth:`Decision.halt` - the run must stop (e.g. an integrator's kill switch).

Stages (gate, verifier) may also return ``escalate``: "not mine to decide",
handing the call to the next stage. A chain that ends on such an escalate
blocks.

The guard's *final* ``escalate`` is different and always carries an
``approval_id`` (:meth:`Decision.await_approval`): only approvable requirements
failed, the call was recorded in the approval queue, it did not run, and
``message`` tells the agent to wait for a supervisor. Like a block it is not
allowed (``verdict`` is BLOCK); unlike a block, no deny is recorded for its
call id, and the same call (resumed with the same id, or retried with a new
one) may pass once a person approved it (:mod:`policyguard.approvals.flow`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["allow", "block", "halt", "escalate"]
Stage = Literal[
    "read_only",
    "unknown_tool",  # the checklist does not name the tool (blocked unless the integrator opts in)
    "bad_call",  # the call itself cannot be judged: unreadable arguments or a reused call id
    "gate",
    "gate_error",
    "verifier",
    "verifier_error",
    "approver",
    "guard",
]
Status = Literal["MET", "NOT_MET", "NOT_APPLICABLE", "UNVERIFIED"]


class Usage(BaseModel):
    """Tokens, latency and cost of one model call (or their sum)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None and other.cost_usd is None
            else (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
            latency_s=self.latency_s + other.latency_s,
            calls=self.calls + other.calls,
        )


class RequirementResult(BaseModel):
    """One requirement's judgement, and who judged it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    status: Status
    evidence: str | None = None
    judged_by: Literal["gate", "verifier", "none"] = "verifier"


class Decision(BaseModel):
    """A stage's (or the guard's) decision about one call."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    outcome: Outcome
    stage: Stage
    message: str | None = Field(default=None, description="Remediation for the agent (block) or reason (halt).")
    verdict: Literal["PASS", "BLOCK"] | None = None
    requirements: list[RequirementResult] = Field(default_factory=list)
    call_id: str | None = None
    tool: str | None = None
    args_sha256: str | None = None
    session_id: str | None = Field(default=None, description="The session the call was judged in, if any.")
    place: str | None = Field(
        default=None,
        description="Which issuance of the call id this decision is about (the host's message and position), "
        "when known: a later call that reuses the id is another call.",
    )
    inconsistency: str | None = None
    error: str | None = None
    usage: Usage | None = None
    resolver_reads: int = 0
    grant: str | None = Field(default=None, description="A signed call-bound grant, when the gate issued one.")
    verifier_evidence: list[str] = Field(
        default_factory=list,
        description="Verifier MET judgements rejected by the evidence check (counted as NOT_MET), one line each.",
    )
    approval_id: str | None = Field(
        default=None,
        description="The approval request this decision waits for (final escalate), spent (allow) or was denied by.",
    )
    shadow_blocked: list[str] = Field(
        default_factory=list,
        description="Requirements in shadow mode that would have blocked this call; it was allowed (see "
        "policyguard.guard.shadow). Empty when nothing was shadowed.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="How an integrator's setting weakened fail-closed for this call (advisory mode let a BLOCK "
        "through; no gate and no verifier checked it), one line each.",
    )

    @classmethod
    def allow(cls, stage: Stage, **fields: object) -> Decision:
        return cls(outcome="allow", stage=stage, verdict="PASS", **fields)  # type: ignore[arg-type]

    @classmethod
    def block(cls, stage: Stage, message: str, **fields: object) -> Decision:
        return cls(outcome="block", stage=stage, message=message, verdict="BLOCK", **fields)  # type: ignore[arg-type]

    @classmethod
    def halt(cls, stage: Stage, reason: str, **fields: object) -> Decision:
        return cls(outcome="halt", stage=stage, message=reason, verdict="BLOCK", **fields)  # type: ignore[arg-type]

    @classmethod
    def escalate(cls, stage: Stage, **fields: object) -> Decision:
        return cls(outcome="escalate", stage=stage, **fields)  # type: ignore[arg-type]

    @classmethod
    def await_approval(cls, approval_id: str, message: str, **fields: object) -> Decision:
        """The guard's final escalate: the call waits in the approval queue as request ``approval_id``."""
        values: dict[str, object] = {"message": message, "approval_id": approval_id, **fields}
        return cls(outcome="escalate", stage="approver", verdict="BLOCK", **values)  # type: ignore[arg-type]

    @property
    def awaiting_approval(self) -> bool:
        """True for the guard's final escalate: the call is waiting for a person (not a stage hand-off)."""
        return self.outcome == "escalate" and self.approval_id is not None

    @property
    def allowed(self) -> bool:
        return self.outcome == "allow"

    @property
    def unverified(self) -> list[str]:
        """Ids of requirements nobody could judge (e.g. with ``--model none``)."""
        return [r.id for r in self.requirements if r.status == "UNVERIFIED"]


def decision_json(decision: Decision) -> dict[str, object]:
    """The Decision as ``policyguard verify`` prints it and ``policyguard serve`` returns it.

    One function for both, so a client in any language reads one schema: the
    model's fields without the unset ones, plus ``unverified`` (requirement ids
    nobody could judge).
    """
    payload: dict[str, object] = decision.model_dump(mode="json", exclude_none=True)
    payload["unverified"] = decision.unverified
    return payload
