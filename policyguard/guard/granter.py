"""Grant issuing: a signed, call-bound grant for every allow, when the guard has a grant issuer (``grants=``).

The executor (:class:`~policyguard.enforcement.grants.GrantVerifier`) runs a
call only on a grant for exactly that call; without an issuer the guard's
decisions carry none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard.decision import Decision
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.messages import ToolCall

from .settings import GuardSettings

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalRequest


class CallGranter:
    """The guard's :class:`~policyguard.stages.Granter`, issuing through its ``grants``."""

    __slots__ = ("settings",)

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings

    def grant(
        self, call: ToolCall, decision: Decision, *, args_sha256: str, session_id: str | None, place: str = ""
    ) -> Decision:
        """``decision`` with a grant when it allows; the grant names ``place`` so the executor reads the deny
        record of this issuance of the call (:class:`~policyguard.enforcement.scoped.CallIdentity`)."""
        grants = self.settings.grants
        if decision.outcome != "allow" or grants is None or decision.grant is not None:
            return decision
        token = grants.issue(
            call,
            principal=self.settings.principal,
            resource=None,
            policy_version=self.settings.checklist.policy.version,
            args_sha256=None if args_sha256 == UNHASHABLE_ARGS else args_sha256,  # hashed once per decision
            session_id=session_id,
            place=place,
        )
        return decision.model_copy(update={"grant": token})

    def for_approval(self, call: ToolCall, request: ApprovalRequest, place: str = "") -> str | None:
        """The grant for ``call`` on a person's approval ``request``, valid no longer than the approval; None
        without an issuer. ``place``: as for :meth:`grant`."""
        grants = self.settings.grants
        if grants is None:
            return None
        return grants.issue(
            call,
            principal=self.settings.principal,
            resource=None,
            policy_version=self.settings.checklist.policy.version,
            expires_at=request.expires_at,
            approval_id=request.id,
            place=place,
        )
