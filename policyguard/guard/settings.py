"""What the guard's stages read of its configuration.

A stage keeps a reference to the guard (typed as :class:`GuardSettings`), not a
copy of its settings: the guard's attributes are public and may be reassigned
after it was built (``guard.gate = other_gate``, ``guard.trace = Trace(path)``),
and every check must see the current value, as it always did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from policyguard.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalQueue
    from policyguard.audit.trace import Trace
    from policyguard.checklist.schema import Checklist
    from policyguard.enforcement.grants import GrantIssuer
    from policyguard.enforcement.store import NonceStore
    from policyguard.stages import Gate, Verifier


class GuardSettings(Protocol):
    """The guard's public settings (see :class:`policyguard.guard.core.Guard`), read on every check."""

    @property
    def checklist(self) -> Checklist: ...
    @property
    def unknown_tools(self) -> str: ...
    @property
    def gate(self) -> Gate | None: ...
    @property
    def verifier(self) -> Verifier | None: ...
    @property
    def trace(self) -> Trace: ...
    @property
    def principal(self) -> str | None: ...
    @property
    def grants(self) -> GrantIssuer | None: ...
    @property
    def decision_ttl_s(self) -> float: ...
    @property
    def denials(self) -> NonceStore | None: ...
    @property
    def approvals(self) -> ApprovalQueue | None: ...
    @property
    def approval_ttl_s(self) -> float: ...
    @property
    def session_wait_s(self) -> float: ...
    @property
    def session_result_wait_s(self) -> float | None: ...


def checked_settings(
    *, unknown_tools: str, approval_ttl_s: float, session_wait_s: float, session_result_wait_s: float | None = None
) -> None:
    """Refuse a setting the guard cannot honour, with a :class:`ConfigError` naming it and the value."""
    if unknown_tools not in ("block", "check"):
        raise ConfigError(f"unknown_tools must be 'block' or 'check', got {unknown_tools!r}")
    if not approval_ttl_s > 0:
        raise ConfigError(f"approval_ttl_s must be positive, got {approval_ttl_s!r}")
    if not session_wait_s >= 0:
        raise ConfigError(f"session_wait_s must be >= 0, got {session_wait_s!r}")
    if session_result_wait_s is not None and not session_result_wait_s >= 0:
        raise ConfigError(f"session_result_wait_s must be >= 0, got {session_result_wait_s!r}")


def checked_mode(mode: str) -> None:
    """The guard's mode is ``enforce`` or ``shadow``; a verifier mode here is named as such."""
    if mode in ("enforce", "shadow"):
        return
    if mode in ("checklist", "raw", "raw_traj", "checklist_only"):
        raise ConfigError(
            f"mode={mode!r} is a verifier mode: pass it as LLMVerifier(mode=...) or "
            "Guard.from_files(verifier_mode=...); Guard's mode is 'enforce' or 'shadow'"
        )
    raise ConfigError(f"mode must be 'enforce' or 'shadow', got {mode!r}")
