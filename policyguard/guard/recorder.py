"""The guard's record of every decision: trace events, counters, and the deny of every block.

Two views of one run (:mod:`policyguard.audit.counters`): the verdict view
(what the guard decided, :meth:`Recorder.decided`) and the runtime view (what
reached the executor, :meth:`Recorder.execution`). Every event goes to the
guard's current ``trace``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from policyguard.audit.counters import Counters
from policyguard.decision import Decision, Usage
from policyguard.enforcement.scoped import CallIdentity

from .denials import DenyWins
from .settings import GuardSettings

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.enforcement.grants import GrantIssuer


class Recorder:
    """Writes the guard's trace events and keeps its counters."""

    __slots__ = ("settings", "denials", "counters")

    def __init__(self, settings: GuardSettings, denials: DenyWins, counters: Counters | None = None) -> None:
        self.settings = settings
        self.denials = denials
        self.counters = Counters() if counters is None else counters

    def emit(self, event: str, **fields: Any) -> None:
        self.settings.trace.emit(event, **fields)

    def submit(self, ids: dict[str, Any], session_id: str | None) -> None:
        self.emit("submit", **traced(ids, session_id))

    def decided(
        self,
        decision: Decision,
        advisory: bool,
        started: float,
        ids: dict[str, Any],
        session_id: str | None,
        place: str = "",
    ) -> None:
        """Count the final ``decision`` and write its events; a block's deny goes to the deny store, under the
        call's identity at ``place`` (:func:`~policyguard.guard.calls.call_place`)."""
        self._count(decision, advisory)
        self._record(decision, advisory, time.perf_counter() - started, ids, session_id, place)

    def execution(self, decision: Decision, *, executed: bool, error: str | None, emit_event: bool) -> None:
        """Whether an allowed call reached the tool (see :meth:`policyguard.guard.core.Guard.record_execution`)."""
        if executed:
            mutating = self.settings.checklist.is_mutating(decision.tool or "")
            self.counters.add(executed=1, executed_mutating=1 if mutating else 0)
            if not emit_event:
                return
            self.emit(
                "execute",
                call_id=decision.call_id,
                tool=decision.tool,
                args_sha256=decision.args_sha256,
                reached_executor=True,
                **_session_field(decision.session_id),
                **({"place": decision.place} if decision.place else {}),
            )
        else:
            self.counters.add(executor_refused=1)
            self.emit(
                "executor_refused",
                call_id=decision.call_id,
                tool=decision.tool,
                args_sha256=decision.args_sha256,
                error=error,
                **_session_field(decision.session_id),
            )

    def _count(self, decision: Decision, advisory: bool) -> None:
        if decision.stage == "read_only":
            self.counters.add(read_only=1)
            return
        deltas: dict[str, int] = {"attempted_mutating": 1}
        if decision.outcome == "halt":
            deltas["halted"] = 1
        elif decision.awaiting_approval:
            deltas["escalated"] = 1
        elif decision.verdict == "BLOCK":
            deltas["blocked"] = 1
            if advisory:
                deltas["advisory_blocks"] = 1
        else:
            deltas["passed"] = 1
            if decision.shadow_blocked:
                deltas["shadow_blocked"] = 1
        if decision.stage in ("verifier_error", "gate_error"):
            deltas["errors"] = 1
        self.counters.add(**deltas)

    def _record(
        self,
        decision: Decision,
        advisory: bool,
        latency_s: float,
        ids: dict[str, Any],
        session_id: str | None,
        place: str,
    ) -> None:
        checklist = self.settings.checklist
        usage = decision.usage or Usage()
        verdict_event = "allow" if decision.outcome == "allow" else "deny"
        extra: dict[str, Any] = {}
        if decision.approval_id is not None and verdict_event == "allow":  # a deny with approval_id is a reviewer's
            extra["approval_id"] = decision.approval_id
        if verdict_event == "allow":
            extra["policy_version"] = checklist.policy.version
            extra["expires_at"] = time.time() + _ttl(self.settings.grants, self.settings.decision_ttl_s)
        elif not decision.awaiting_approval:
            call = CallIdentity(session_id, ids["call_id"], ids["tool"], ids["args_sha256"], place)
            extra.update(self.denials.remember(call))
        if not decision.awaiting_approval:  # a waiting call is neither allowed nor denied: its event is `escalate`
            self.emit(verdict_event, **traced(ids, session_id, place), **extra)
        self.emit(
            "decision",
            **traced(ids, session_id),
            policy_version=checklist.policy.version,
            checklist_version=checklist.version,
            outcome=decision.outcome,
            stage=decision.stage,
            verdict=decision.verdict,
            advisory=advisory,
            requirements=[r.model_dump() for r in decision.requirements],
            remediation=decision.message,
            inconsistency=decision.inconsistency,
            verifier_evidence=decision.verifier_evidence or None,
            warnings=decision.warnings or None,
            shadow_blocked=decision.shadow_blocked or None,
            error=decision.error,
            reached_executor=False if decision.outcome != "allow" else None,
            latency_s=round(latency_s, 6),
            input_tokens=usage.input_tokens,
            cached_tokens=usage.cached_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
            resolver_reads=decision.resolver_reads,
            approval_id=decision.approval_id,
        )


def traced(ids: dict[str, Any], session_id: str | None, place: str = "") -> dict[str, Any]:
    """A trace event's call fields, with the session id when the call belongs to a session and the place
    that names its issuance when known (deny wins and the INV-1 audit tell calls apart by it)."""
    fields = ids if session_id is None else {**ids, "session_id": session_id}
    return {**fields, "place": place} if place else fields


def _session_field(session_id: str | None) -> dict[str, Any]:
    return {} if session_id is None else {"session_id": session_id}


def _ttl(grants: GrantIssuer | None, default: float) -> float:
    """How long an allow stays valid: the grant's lifetime when grants are issued."""
    ttl = getattr(grants, "ttl_s", None) if grants is not None else None
    return float(ttl) if ttl is not None else default
