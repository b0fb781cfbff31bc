"""tau2 airline in the replay suite: violations, gold labels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...profile import ReplayDomain
from .labels import GOLD_DISAGREEMENTS, POLICY_CONTRADICTING_GOLD

if TYPE_CHECKING:  # pragma: no cover
    from ...domain import DomainData

__all__ = ["GOLD_DISAGREEMENTS", "profile"]


def profile(data: DomainData) -> ReplayDomain:
    from ...domain import task_user_id
    from . import violations

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
