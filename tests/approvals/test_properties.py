"""Whatever an agent changes in an approved call, the approval does not follow it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import make_rig, refund_call

APPROVED = refund_call("c0").arguments

changes = st.one_of(
    st.builds(lambda a: {"amount": a}, st.one_of(st.integers(501, 5000), st.floats(500.01, 5000))),
    st.builds(lambda o: {"order_id": o}, st.sampled_from(["O2", "O1 ", "o1", "O1\u200b", "Ｏ1"])),
    st.builds(lambda k: {"idempotency_key": k}, st.sampled_from(["refund:O2", "refund:o1", "x"])),
    st.builds(lambda r: {"reason": r}, st.text(min_size=1, max_size=8)),
    st.builds(lambda v: {"approval_id": v}, st.text(max_size=12)),
    st.builds(lambda v: {"currency": v}, st.sampled_from(["USD", "EUR"])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change=changes)
def test_a_changed_call_never_runs_on_the_approval(change: dict[str, Any]) -> None:
    arguments = {**APPROVED, **change}
    if arguments == APPROVED:
        return
    with tempfile.TemporaryDirectory() as tmp:
        rig = make_rig(Path(tmp) / "p.db")
        try:
            waiting = rig.check(refund_call("c1"))
            assert waiting.approval_id is not None
            rig.queue.approve(waiting.approval_id, "alice")
            changed = refund_call("c2").model_copy(update={"arguments": arguments})
            decision = rig.check(changed)
            assert not decision.allowed and decision.approval_id != waiting.approval_id
            assert rig.run(changed, decision.grant).executed is False
            assert rig.refund.calls == []
            assert rig.queue.get(waiting.approval_id).status == "approved"  # type: ignore[union-attr]
        finally:
            rig.store.close()
