"""Deny wins: a call denied once stays denied (INV-1), through the guard's deny store (``denials=``).

The same store is the executor's :class:`~policyguard.enforcement.grants.GrantVerifier`
``nonces=``: a deny recorded here also stops a grant issued before it. A deny
is keyed by the call's identity
(:class:`~policyguard.enforcement.scoped.CallIdentity`: session, call id,
tool, argument hash and place), so another conversation's ``call_5``, and a
later turn's ``call_0`` that is another call, are judged on their own.
"""

from __future__ import annotations

from typing import Any

from policyguard.decision import Decision
from policyguard.enforcement.scoped import CallIdentity, any_denied
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.messages import ToolCall

from .remediation import NO_VERIFIER_MESSAGE
from .settings import GuardSettings


def identity(call: ToolCall, session_id: str | None, place: str, args_sha256: str | None = None) -> CallIdentity:
    """``call``'s identity for the deny store; ``args_sha256``: the hash the guard took for this decision."""
    sha = call.args_sha256_or_none() if args_sha256 is None else args_sha256
    return CallIdentity(session_id, call.id, call.name, sha or UNHASHABLE_ARGS, place)


class DenyWins:
    """Checks an allow against the deny store, and records denies in it; without a store, does nothing."""

    __slots__ = ("settings",)

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings

    def check(self, call: ToolCall, decision: Decision, session_id: str | None, place: str = "") -> Decision:
        """``decision``, or a block when this call was denied before: a re-check never turns it into an allow.

        ``place``: which issuance of the call this is
        (:func:`~policyguard.guard.calls.call_place`; ``""``: unknown, the stricter identity).
        """
        denials = self.settings.denials
        if denials is None:
            return decision
        try:
            keys = identity(call, session_id, place, decision.args_sha256).deny_lookups()
            denied = any_denied(denials, keys)
        except Exception as exc:  # an unreadable deny store cannot vouch for the allow
            return Decision.block("guard", NO_VERIFIER_MESSAGE, error=f"deny store unavailable: {exc}")
        if not denied:
            return decision
        return Decision.block(
            "guard",
            "This call was refused earlier and a refusal is final, so it was not performed. Do not retry it unchanged.",
            error=f"call {call.id} was denied earlier (deny wins)",
        )

    def remember(self, call: CallIdentity) -> dict[str, Any]:
        """Record a deny of ``call`` for the executor; a store failure is returned for the deny event, never raised."""
        denials = self.settings.denials
        if denials is None:
            return {}
        try:
            for key in call.deny_records():
                denials.deny(key)
        except Exception as exc:
            return {"deny_recorded": False, "store_error": f"{type(exc).__name__}: {exc}"}
        return {}
