"""tau2 retail in the replay suite: violations, gold labels, the reads before a write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...profile import ReplayDomain
from .violations import GOLD_DISAGREEMENTS

if TYPE_CHECKING:  # pragma: no cover
    from ...domain import DomainData

__all__ = ["GOLD_DISAGREEMENTS", "profile"]


def profile(data: DomainData) -> ReplayDomain:
    from . import violations
    from .reads import reads_before

    raw = data.raw_db
    return ReplayDomain(
        name="retail",
        classes=violations.CLASSES,
        not_expressible=violations.NOT_EXPRESSIBLE,
        generate=violations.generate,
        contradicting_gold=violations.POLICY_CONTRADICTING_GOLD,
        gold_disagreements=GOLD_DISAGREEMENTS,
        user_id=lambda task: violations.task_user(task, raw),
        evaluator_classes=("other_users_order",),
        prepare=lambda transcript, tool, args, user_id: reads_before(raw, transcript, tool, args, user_id),
    )
