"""tau2 telecom in the replay suite: violations, the customer of a task, the lookup before a write."""

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
        name="telecom",
        classes=violations.CLASSES,
        not_expressible=violations.NOT_EXPRESSIBLE,
        generate=violations.generate,
        contradicting_gold=violations.POLICY_CONTRADICTING_GOLD,
        gold_disagreements=GOLD_DISAGREEMENTS,
        user_id=lambda task: violations.task_customer(task, raw),
        evaluator_classes=(),  # telecom's reward is assertions on the user's device: see benchmarks/tau2/README.md
        prepare=lambda transcript, tool, args, user_id: reads_before(raw, transcript, user_id),
    )
