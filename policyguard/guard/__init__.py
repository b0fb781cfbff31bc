"""The guard: runs a pending call through its stages in order and combines their decisions.

:class:`Guard` is the ordering and the rules that combine decisions; each step
(front refusals, gate, verifier, a person's approval, the grant) is a stage
object of its own in this package.

May use: every core package below it (approvals, enforcement, verifier, gate,
session, audit, checklist, trajectory) and the base modules. Never an edge
(integrations, serve, review, cli) or a benchmark.
"""

from .core import Guard
from .offloop import off_loop
from .remediation import (
    APPROVAL_UNAVAILABLE,
    NO_VERIFIER_MESSAGE,
    SESSION_BUSY_MESSAGE,
    after_block,
    remediation_message,
)

__all__ = [
    "APPROVAL_UNAVAILABLE",
    "NO_VERIFIER_MESSAGE",
    "SESSION_BUSY_MESSAGE",
    "Guard",
    "after_block",
    "off_loop",
    "remediation_message",
]
