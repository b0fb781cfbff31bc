"""Human approvals for large money effects, checked by the executor at execution time.

A money tool's ``effect.approval_threshold`` says that an amount above it needs
a recorded human approval. The executor asks an :class:`ApprovalCheck` about
the exact effect it is about to commit; without one, every amount above the
threshold is refused (``needs_approval``). A general approvals service (who may
approve, how an approval is requested and bound to a call) is not part of this module.

:class:`RecordApprovals` is the rule of the refund case
(``benchmarks/refund``): the call names an approval, the approvals service's
record for it is read (never the text the agent or customer wrote), and it
covers the effect only when it is ``approved``, for this same transaction, and
for at least this amount.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from policyguard.trajectory.messages import ToolCall


class MoneyEffect(BaseModel):
    """The money a call is about to move, as the executor read it from the call's arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    amount: float
    currency: str | None
    transaction_id: str
    idempotency_key: str


class ApprovalCheck(Protocol):
    """Is there a recorded approval for exactly this effect? One method, no side effects."""

    def __call__(self, call: ToolCall, effect: MoneyEffect) -> str | None:
        """None when an approval covers ``effect``; otherwise why not (one line, shown to the agent)."""
        ...


class RecordApprovals:
    """Approvals as records of an approvals service, read by id at execution time.

    ``lookup(approval_id)`` returns the service's record (a mapping with
    ``status``, ``transaction_id``, ``amount`` and optionally ``currency``) or
    None. A lookup that raises is no approval: the call is refused.
    """

    def __init__(self, lookup: Callable[[str], Mapping[str, Any] | None], *, approval_arg: str = "approval_id") -> None:
        self.lookup = lookup
        self.approval_arg = approval_arg

    def __call__(self, call: ToolCall, effect: MoneyEffect) -> str | None:
        approval_id = call.arguments.get(self.approval_arg)
        if not isinstance(approval_id, str) or not approval_id:
            return f"no {self.approval_arg!r} argument names an approval"
        try:
            record = self.lookup(approval_id)
        except Exception as exc:  # an unreadable approvals service approves nothing
            return f"approval {approval_id!r} could not be read ({type(exc).__name__})"
        if not isinstance(record, Mapping):
            return f"approval {approval_id!r} was not found"
        if record.get("status") != "approved":
            return f"approval {approval_id!r} is {record.get('status')!r}, not 'approved'"
        if record.get("transaction_id") != effect.transaction_id:
            return f"approval {approval_id!r} is for another transaction, not {effect.transaction_id!r}"
        covered = record.get("amount")
        if isinstance(covered, bool) or not isinstance(covered, int | float) or not math.isfinite(covered):
            return f"approval {approval_id!r} has no valid amount"
        if covered < effect.amount:
            return f"approval {approval_id!r} covers {covered:g}, not {effect.amount:g}"
        currency = record.get("currency")
        if currency is not None and effect.currency is not None and currency != effect.currency:
            return f"approval {approval_id!r} is in {currency!r}, not {effect.currency!r}"
        return None
