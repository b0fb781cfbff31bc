"""Escalation to a person: the approval queue, the flow that binds an approval to one call, its stores.

:mod:`.queue` records requests and decisions (SQLite), :mod:`.pgqueue` the
same tables in PostgreSQL, :mod:`.url` opens either by URL, and :mod:`.flow`
turns a call the gate may escalate into a request and a person's answer into
a decision bound to that exact call.

May use: :mod:`policyguard.enforcement`, :mod:`policyguard.gate`,
:mod:`policyguard.audit`, :mod:`policyguard.checklist`,
:mod:`policyguard.trajectory` and the base modules.
"""

from __future__ import annotations

from typing import Any

# Until this release ``policyguard.approvals`` was the executor's approval check;
# it lives in ``policyguard.enforcement.approvalcheck`` now.
_MOVED = {"MoneyEffect", "ApprovalCheck", "RecordApprovals"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from policyguard._compat import moved_name

        return moved_name(__name__, name, "policyguard.enforcement.approvalcheck")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
