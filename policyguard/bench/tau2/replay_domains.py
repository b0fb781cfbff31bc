"""What the replay suite needs to know about each tau2 domain.

The suite (:mod:`.replay`) is the same for every domain; a :class:`ReplayDomain`
supplies the domain's violation classes and generator, the gold it reports
apart, who a task's customer is, and the reads a diligent agent makes before a
write that the checklist's facts alone cannot name (retail: the authenticating
lookup and the product details of items being exchanged or modified).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policyguard.errors import ConfigError
from policyguard.gate.facts import successful_results

from .violations import ViolationCase

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.tasks import Task

    from .domain import DomainData
    from .transcript import Transcript

Generator = Callable[..., list[ViolationCase]]


@dataclass(frozen=True)
class ReplayDomain:
    """One domain's part of the replay suite.

    ``prepare(transcript, tool, arguments, user_id)`` makes the domain's extra
    reads before a write and returns them as ``tool(args)`` labels.
    ``evaluator_classes`` are tried in order for the violation injected into
    the gold dialogue for tau2's evaluator: it must be one tau2 executes (so
    executing it changes the database and drops the reward).
    """

    name: str
    classes: dict[str, str]
    not_expressible: dict[str, str]
    generate: Generator
    contradicting_gold: dict[str, str]
    gold_disagreements: dict[str, str]
    user_id: Callable[[Task], str | None]
    evaluator_classes: tuple[str, ...]
    prepare: Callable[[Transcript, str, dict[str, Any], str | None], list[str]] = field(
        default=lambda transcript, tool, arguments, user_id: []
    )


def replay_domain(data: DomainData) -> ReplayDomain:
    """The replay profile of ``data.domain``."""
    if data.domain == "airline":
        from . import violations
        from .domain import task_user_id
        from .labels import GOLD_DISAGREEMENTS, POLICY_CONTRADICTING_GOLD

        return ReplayDomain(
            name="airline",
            classes=violations.CLASSES,
            not_expressible=violations.NOT_EXPRESSIBLE,
            generate=violations.generate,
            contradicting_gold=POLICY_CONTRADICTING_GOLD,
            gold_disagreements=GOLD_DISAGREEMENTS,
            user_id=task_user_id,
            evaluator_classes=("cancel_nonrefundable",),
        )
    if data.domain == "retail":
        from . import violations_retail as retail

        raw = data.raw_db
        return ReplayDomain(
            name="retail",
            classes=retail.CLASSES,
            not_expressible=retail.NOT_EXPRESSIBLE,
            generate=retail.generate,
            contradicting_gold=retail.POLICY_CONTRADICTING_GOLD,
            gold_disagreements=retail.GOLD_DISAGREEMENTS,
            user_id=lambda task: retail.task_user(task, raw),
            evaluator_classes=("other_users_order",),
            prepare=lambda transcript, tool, args, user_id: _retail_reads(raw, transcript, tool, args, user_id),
        )
    if data.domain == "telecom":
        from . import violations_telecom as telecom

        raw = data.raw_db
        return ReplayDomain(
            name="telecom",
            classes=telecom.CLASSES,
            not_expressible=telecom.NOT_EXPRESSIBLE,
            generate=telecom.generate,
            contradicting_gold=telecom.POLICY_CONTRADICTING_GOLD,
            gold_disagreements=telecom.GOLD_DISAGREEMENTS,
            user_id=lambda task: telecom.task_customer(task, raw),
            evaluator_classes=(),  # telecom's reward is env assertions on the user's device: see the docs
            prepare=lambda transcript, tool, args, user_id: _telecom_reads(raw, transcript, user_id),
        )
    raise ConfigError(f"the replay suite has no violations for the {data.domain!r} domain")


def disagreements(domain: str) -> dict[str, str]:
    """The gold disagreements explained in the table for ``domain`` (no database needed)."""
    if domain == "retail":
        from .violations_retail import GOLD_DISAGREEMENTS as RETAIL

        return RETAIL
    if domain == "telecom":
        from .violations_telecom import GOLD_DISAGREEMENTS as TELECOM

        return TELECOM
    from .labels import GOLD_DISAGREEMENTS

    return GOLD_DISAGREEMENTS


def _telecom_reads(raw: dict[str, Any], transcript: Transcript, user_id: str | None) -> list[str]:
    """Look the customer up by phone when nobody was looked up yet (the principal's read takes a phone number)."""
    from .violations_telecom import lookup

    trajectory = transcript.trajectory()
    if any(next(successful_results(trajectory, t), None) for t in ("get_customer_by_phone", "get_customer_by_id")):
        return []
    for customer in raw["customers"]:
        if customer["customer_id"] == user_id:
            name, args = lookup(customer)
            transcript.call(name, args)
            return [_label(name, args)]
    return []


LOOKUPS = ("find_user_id_by_email", "find_user_id_by_name_zip")


def _retail_reads(
    raw: dict[str, Any], transcript: Transcript, tool: str, arguments: dict[str, Any], user_id: str | None
) -> list[str]:
    """Authenticate by email when no lookup succeeded yet; read the products of the items to change."""
    from .violations_retail import lookup

    made: list[str] = []
    trajectory = transcript.trajectory()
    if user_id in raw["users"] and not any(next(successful_results(trajectory, t), None) for t in LOOKUPS):
        name, args = lookup(raw["users"][user_id])
        transcript.call(name, args)
        made.append(_label(name, args))
    if "new_item_ids" in arguments:
        read = {r.call.arguments.get("product_id") for r in successful_results(trajectory, "get_product_details")}
        for pid in _product_ids(raw, arguments.get("item_ids") or []):
            if pid not in read:
                transcript.call("get_product_details", {"product_id": pid})
                made.append(_label("get_product_details", {"product_id": pid}))
    return made


def _product_ids(raw: dict[str, Any], item_ids: Iterable[Any]) -> list[str]:
    """The products of ``item_ids`` (item ids are unique across products in tau2's catalogue)."""
    by_item = {vid: pid for pid, product in raw["products"].items() for vid in product["variants"]}
    return list(dict.fromkeys(by_item[i] for i in item_ids if isinstance(i, str) and i in by_item))


def _label(tool: str, keys: dict[str, Any]) -> str:
    import json

    return f"{tool}({json.dumps(keys, sort_keys=True)})"
