"""The service's metrics count what shadowed requirements would have blocked, by requirement."""

from __future__ import annotations

from policyguard.decision import Decision
from policyguard.serve.metrics import Metrics


def test_a_shadow_block_is_counted_per_requirement_and_a_plain_allow_is_not() -> None:
    metrics = Metrics()
    shadowed = Decision.allow("gate", call_id="c1", tool="issue_refund").model_copy(
        update={"shadow_blocked": ["within-captured", "one-refund"]}
    )
    metrics.decision(shadowed, 0.001)
    metrics.decision(shadowed, 0.001)
    metrics.decision(Decision.allow("gate", call_id="c2", tool="issue_refund"), 0.001)
    text = metrics.render()
    assert 'policyguard_shadow_blocks_total{requirement="within-captured"} 2' in text
    assert 'policyguard_shadow_blocks_total{requirement="one-refund"} 2' in text
    assert "# TYPE policyguard_shadow_blocks_total counter" in text
