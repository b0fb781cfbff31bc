"""The reads a diligent retail agent makes before a write that the checklist's facts alone cannot name."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from policyguard.gate.facts import successful_results

from ...profile import read_label

if TYPE_CHECKING:  # pragma: no cover
    from ...transcript import Transcript


LOOKUPS = ("find_user_id_by_email", "find_user_id_by_name_zip")


def reads_before(
    raw: dict[str, Any], transcript: Transcript, tool: str, arguments: dict[str, Any], user_id: str | None
) -> list[str]:
    """Authenticate by email when no lookup succeeded yet; read the products of the items to change."""
    from .violations import lookup

    made: list[str] = []
    trajectory = transcript.trajectory()
    if user_id in raw["users"] and not any(next(successful_results(trajectory, t), None) for t in LOOKUPS):
        name, args = lookup(raw["users"][user_id])
        transcript.call(name, args)
        made.append(read_label(name, args))
    if "new_item_ids" in arguments:
        read = {r.call.arguments.get("product_id") for r in successful_results(trajectory, "get_product_details")}
        for pid in _product_ids(raw, arguments.get("item_ids") or []):
            if pid not in read:
                transcript.call("get_product_details", {"product_id": pid})
                made.append(read_label("get_product_details", {"product_id": pid}))
    return made


def _product_ids(raw: dict[str, Any], item_ids: Iterable[Any]) -> list[str]:
    """The products of ``item_ids`` (item ids are unique across products in tau2's catalogue)."""
    by_item = {vid: pid for pid, product in raw["products"].items() for vid in product["variants"]}
    return list(dict.fromkeys(by_item[i] for i in item_ids if isinstance(i, str) and i in by_item))
