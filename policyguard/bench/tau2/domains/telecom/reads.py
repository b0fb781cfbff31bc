"""The read a diligent telecom agent makes before a write: the customer, looked up by phone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from policyguard.gate.facts import successful_results

from ...profile import read_label

if TYPE_CHECKING:  # pragma: no cover
    from ...transcript import Transcript


def reads_before(raw: dict[str, Any], transcript: Transcript, user_id: str | None) -> list[str]:
    """Look the customer up by phone when nobody was looked up yet (the principal's read takes a phone number)."""
    from .violations import lookup

    trajectory = transcript.trajectory()
    if any(next(successful_results(trajectory, t), None) for t in ("get_customer_by_phone", "get_customer_by_id")):
        return []
    for customer in raw["customers"]:
        if customer["customer_id"] == user_id:
            name, args = lookup(customer)
            transcript.call(name, args)
            return [read_label(name, args)]
    return []
