"""Deny wins: a call id denied once stays denied (INV-1), through the guard's deny store (``denials=``).

The same store is the executor's :class:`~policyguard.enforcement.grants.GrantVerifier`
``nonces=``: a deny recorded here also stops a grant issued before it. In a
session a deny is keyed by the session and the call id
(:func:`~policyguard.enforcement.scoped.deny_key`): another conversation's
``call_5`` is another call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policyguard.decision import Decision
from policyguard.enforcement.scoped import deny_key
from policyguard.trajectory.messages import ToolCall

from .remediation import NO_VERIFIER_MESSAGE
from .settings import GuardSettings


@dataclass(frozen=True)
class DenyWins:
    """Checks an allow against the deny store, and records denies in it; without a store, does nothing."""

    settings: GuardSettings

    def check(self, call: ToolCall, decision: Decision, session_id: str | None) -> Decision:
        """``decision``, or a block when ``call``'s id was denied before: a re-check never turns it into an allow."""
        denials = self.settings.denials
        if denials is None:
            return decision
        try:
            denied = denials.is_denied(deny_key(session_id, call.id))
        except Exception as exc:  # an unreadable deny store cannot vouch for the allow
            return Decision.block("guard", NO_VERIFIER_MESSAGE, error=f"deny store unavailable: {exc}")
        if not denied:
            return decision
        return Decision.block(
            "guard",
            "This call was refused earlier and a refusal is final, so it was not performed. Do not retry it unchanged.",
            error=f"call {call.id} was denied earlier (deny wins)",
        )

    def remember(self, session_id: str | None, call_id: str) -> dict[str, Any]:
        """Record a deny for the executor; a store failure is returned for the deny event, never raised."""
        denials = self.settings.denials
        if denials is None:
            return {}
        try:
            denials.deny(deny_key(session_id, call_id))
        except Exception as exc:
            return {"deny_recorded": False, "store_error": f"{type(exc).__name__}: {exc}"}
        return {}
