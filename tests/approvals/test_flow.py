"""Escalate, approve, retry: a person's yes lets exactly the approved call run, once."""

from __future__ import annotations

import base64
import hashlib
import json

import jwt
import pytest

from policyguard.approvals.flow import EFFECT_APPROVAL, approval_version, decide, matching, new_request
from policyguard.approvals.queue import ApprovalError
from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.guard.core import Guard
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .conftest import CHECKLIST, POLICY, PRINCIPAL, Rig, checklist_data, refund_call


def escalate(rig: Rig, call_id: str = "c1", **kw: object) -> Decision:
    decision = rig.check(refund_call(call_id, **kw))  # type: ignore[arg-type]
    assert decision.awaiting_approval, decision
    return decision


def test_a_large_refund_waits_for_a_supervisor(rig: Rig) -> None:
    decision = escalate(rig)
    assert (decision.outcome, decision.stage, decision.verdict, decision.allowed) == (
        "escalate",
        "approver",
        "BLOCK",
        False,
    )
    assert decision.grant is None and rig.refund.calls == []
    assert f"request {decision.approval_id}" in (decision.message or "")
    assert "Do not retry it with other arguments" in (decision.message or "")
    [request] = rig.queue.pending()
    assert request.id == decision.approval_id
    assert (request.call_id, request.tool, request.principal) == ("c1", "issue_refund", PRINCIPAL)
    assert request.arguments["amount"] == 800 and request.args_sha256 == refund_call("c1").args_sha256
    failed = {r.id: r for r in request.failed}
    assert set(failed) == {EFFECT_APPROVAL} and failed[EFFECT_APPROVAL].approvable
    met = {r.id: r for r in request.requirements if r.status == "MET"}
    assert met["refund.known_order"].source == "Refunds go only to known orders (ids start with O)."
    assert "needs a person's approval" in (request.remediation or "")  # what the gate would have told the agent
    assert request.dialogue[0].content == "Refund my order." and "issue_refund(" in request.dialogue[-1].content
    assert rig.guard.counters.escalated == 1 and rig.guard.counters.blocked == 0


def test_the_final_escalate_is_traced_as_escalate_not_as_a_verdict(rig: Rig) -> None:
    decision = escalate(rig)
    kinds = [e["event"] for e in rig.trace.events]
    assert kinds == ["submit", "escalate", "decision"]
    assert not rig.store.is_denied("c1")  # waiting is not refused: the same call may resume once approved
    escalated = rig.trace.events[1]
    assert (escalated["call_id"], escalated["approval_id"], escalated["new"]) == ("c1", decision.approval_id, True)
    assert rig.trace.events[-1]["outcome"] == "escalate" and rig.trace.events[-1]["approval_id"] == decision.approval_id


def test_a_small_refund_needs_no_person(rig: Rig) -> None:
    decision, result = rig.attempt(refund_call("c1", amount=100))
    assert decision.allowed and decision.approval_id is None
    assert result is not None and result.executed
    assert rig.queue.all() == []


def test_a_failure_no_person_may_approve_is_blocked_not_queued(rig: Rig) -> None:
    decision = rig.check(refund_call("c1", order="X9"))
    assert decision.outcome == "block" and decision.stage == "gate"
    assert rig.queue.all() == []


def test_an_approvable_requirement_escalates_even_under_the_threshold(rig: Rig) -> None:
    decision = escalate(rig, amount=100, reason=None)
    [request] = rig.queue.pending()
    assert [r.id for r in request.failed] == ["refund.reason_given"] and request.id == decision.approval_id


def test_asking_again_while_pending_reuses_the_request(rig: Rig) -> None:
    first = escalate(rig, "c1")
    second = escalate(rig, "c2")
    assert first.approval_id == second.approval_id and len(rig.queue.all()) == 1
    assert rig.trace.events[-2]["event"] == "escalate" and rig.trace.events[-2]["new"] is False


def test_after_approval_the_same_call_runs_exactly_once(rig: Rig) -> None:
    waiting = escalate(rig, "c1")
    assert waiting.approval_id is not None
    decide(rig.queue, waiting.approval_id, "approve", "alice", "VIP customer", trace=rig.trace)
    decision, result = rig.attempt(refund_call("c2"))
    assert decision.allowed and decision.stage == "approver" and decision.approval_id == waiting.approval_id
    assert result is not None and result.executed and result.reason == "executed"
    assert len(rig.refund.calls) == 1 and rig.refund.calls[0]["amount"] == 800
    used = rig.queue.get(waiting.approval_id)
    assert used is not None and (used.status, used.used_call_id) == ("used", "c2")
    assert decision.grant is not None
    assert used.grant_sha256 == hashlib.sha256(decision.grant.encode()).hexdigest()
    claims = jwt.decode(decision.grant, options={"verify_signature": False})
    assert claims["approval_id"] == waiting.approval_id and claims["exp"] <= used.expires_at
    assert rig.run(refund_call("c2"), decision.grant).reason == "replayed"
    assert len(rig.refund.calls) == 1


def test_the_approval_grant_is_stored_as_a_digest_only(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    decision = rig.check(refund_call("c2"))
    assert decision.grant is not None
    wal = rig.path.with_name(rig.path.name + "-wal")
    data = rig.path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert waiting.approval_id.encode() in data  # the file is the one the queue writes
    assert decision.grant.encode() not in data
    assert decision.grant.split(".")[2].encode() not in data  # not even the signature


def test_an_approval_is_spent_once(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    assert rig.check(refund_call("c2")).allowed
    again = rig.check(refund_call("c3"))
    assert again.awaiting_approval and again.approval_id != waiting.approval_id
    assert rig.run(refund_call("c3"), None).reason == "needs_approval"


def test_an_approval_does_not_cover_a_changed_amount(rig: Rig) -> None:
    waiting = escalate(rig, amount=800)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    changed = rig.check(refund_call("c2", amount=900))
    assert changed.awaiting_approval and changed.approval_id != waiting.approval_id
    assert rig.queue.get(waiting.approval_id).status == "approved"  # type: ignore[union-attr]
    assert rig.refund.calls == []


def test_an_approval_grant_does_not_cover_other_arguments_at_the_executor(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    decision = rig.check(refund_call("c2", amount=800))
    for other in (refund_call("c2", amount=900), refund_call("c2", order="O2")):
        assert not rig.run(other, decision.grant).executed
    assert rig.refund.calls == []


def test_an_approval_id_of_another_transaction_is_refused(rig: Rig) -> None:
    """Seed 003's exercise: the call cites an approval that belongs to another order."""
    for_o1 = escalate(rig, "c1", order="O1")
    assert for_o1.approval_id is not None
    rig.queue.approve(for_o1.approval_id, "alice")
    cited = rig.check(refund_call("c2", order="O2", approval_id=for_o1.approval_id))
    assert cited.awaiting_approval and cited.approval_id != for_o1.approval_id
    assert rig.run(refund_call("c2", order="O2", approval_id=for_o1.approval_id), None).reason == "needs_approval"
    assert rig.refund.calls == [] and rig.queue.get(for_o1.approval_id).status == "approved"  # type: ignore[union-attr]


def test_an_approval_does_not_pass_to_another_principal(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    other = rig.check(refund_call("c2"), guard=rig.guard_with(principal="agent-2"))
    assert other.awaiting_approval and other.approval_id != waiting.approval_id
    assert rig.queue.get(waiting.approval_id).status == "approved"  # type: ignore[union-attr]
    decision = rig.check(refund_call("c3"))
    assert decision.allowed
    assert rig.run(refund_call("c3"), decision.grant, principal="agent-2").reason == "binding:principal"


def test_an_approval_does_not_survive_a_checklist_change(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    changed = Checklist.model_validate(checklist_data("Every refund needs a written reason."))
    assert changed.policy.version == CHECKLIST.policy.version and changed.version != CHECKLIST.version
    decision = rig.check(refund_call("c2"), guard=rig.guard_with(checklist=changed))
    assert decision.awaiting_approval and decision.approval_id != waiting.approval_id


def test_an_approval_grant_does_not_survive_a_policy_change(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    decision = rig.check(refund_call("c2"))
    rig.executor.verifier.current_policy_version = lambda: "sha256:" + "9" * 64
    assert rig.run(refund_call("c2"), decision.grant).reason == "policy_version"
    assert rig.refund.calls == []


def test_an_expired_approval_is_not_spent(tmp_path: object) -> None:
    from .conftest import make_rig

    rig = make_rig(tmp_path / "e.db", approval_ttl_s=60)  # type: ignore[operator]
    try:
        waiting = escalate(rig)
        assert waiting.approval_id is not None
        rig.queue.approve(waiting.approval_id, "alice")
        rig.clock.now += 61
        decision = rig.check(refund_call("c2"))
        assert decision.awaiting_approval and decision.approval_id != waiting.approval_id
        assert rig.queue.get(waiting.approval_id).status == "expired"  # type: ignore[union-attr]
    finally:
        rig.store.close()


def test_an_approval_grant_expires_with_its_approval(tmp_path: object) -> None:
    from .conftest import make_rig

    rig = make_rig(tmp_path / "g.db", approval_ttl_s=60)  # type: ignore[operator]
    try:
        waiting = escalate(rig)
        assert waiting.approval_id is not None
        rig.queue.approve(waiting.approval_id, "alice")
        decision = rig.check(refund_call("c2"))
        assert decision.allowed
        rig.clock.now += 61  # the grant's own lifetime (120 s) would still run
        assert rig.run(refund_call("c2"), decision.grant).reason == "expired"
        assert rig.refund.calls == []
    finally:
        rig.store.close()


def test_a_paused_call_resumes_with_its_own_id_after_approval(rig: Rig) -> None:
    """Frameworks that pause a tool call for a person resume the same call id; the dialogue has no answer yet."""
    from .conftest import dialogue

    call = refund_call("c1")
    waiting = rig.guard.check(call, dialogue(call))
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    resumed = rig.guard.check(call, dialogue(call))
    assert resumed.allowed and resumed.approval_id == waiting.approval_id
    assert rig.run(call, resumed.grant).executed and len(rig.refund.calls) == 1
    assert rig.run(call, resumed.grant).reason == "replayed"


def test_a_reviewers_deny_is_recorded_for_the_call_id_at_the_executor(rig: Rig) -> None:
    waiting = escalate(rig, amount=100, reason=None)  # under the threshold: only the grant stands in the way
    assert waiting.approval_id is not None
    rig.queue.deny(waiting.approval_id, "bob")
    assert rig.store.is_denied("c1")
    call = refund_call("c1", amount=100, reason=None)
    grant = rig.issuer.issue(call, principal=PRINCIPAL, resource=None, policy_version=CHECKLIST.policy.version)
    assert rig.run(call, grant).reason == "denied" and rig.refund.calls == []


def test_deny_is_final_for_that_call(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    decide(rig.queue, waiting.approval_id, "deny", "bob", "refund abuse", trace=rig.trace)
    with pytest.raises(ApprovalError):
        rig.queue.approve(waiting.approval_id, "alice")
    for call_id in ("c2", "c3"):
        decision = rig.check(refund_call(call_id))
        assert (decision.outcome, decision.stage, decision.approval_id) == ("block", "approver", waiting.approval_id)
        assert "denied" in (decision.message or "") and "refund abuse" in (decision.message or "")
    assert len(rig.queue.all()) == 1 and rig.refund.calls == []


def test_a_gate_grant_alone_does_not_move_a_large_amount(rig: Rig) -> None:
    call = refund_call("c1")
    grant = rig.issuer.issue(call, principal=PRINCIPAL, resource=None, policy_version=CHECKLIST.policy.version)
    assert rig.run(call, grant).reason == "needs_approval"
    assert rig.refund.calls == []


def test_a_tampered_approval_grant_is_refused(rig: Rig) -> None:
    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    decision = rig.check(refund_call("c2"))
    assert decision.grant is not None
    header, _, signature = decision.grant.split(".")
    claims = jwt.decode(decision.grant, options={"verify_signature": False})
    longer = base64.urlsafe_b64encode(json.dumps({**claims, "exp": claims["exp"] + 86400}).encode())
    forged = f"{header}.{longer.decode().rstrip('=')}.{signature}"
    assert rig.run(refund_call("c2"), forged).reason == "signature"
    from policyguard.enforcement.grants import GrantIssuer, generate_keypair

    stranger = GrantIssuer(generate_keypair()[0], clock=rig.clock)
    own = stranger.issue(
        refund_call("c9"),
        principal=PRINCIPAL,
        resource=None,
        policy_version=CHECKLIST.policy.version,
        approval_id=waiting.approval_id,
    )
    assert rig.run(refund_call("c9"), own).reason in ("signature", "needs_approval")
    assert rig.refund.calls == []


def test_without_a_queue_the_guard_blocks_as_before(rig: Rig) -> None:
    guard = Guard(CHECKLIST, POLICY, gate=rig.guard.gate, allow_unverified=True, principal=PRINCIPAL)
    decision = rig.check(refund_call("c1"), guard=guard)
    assert decision.outcome == "block" and decision.approval_id is None


def test_advisory_mode_queues_nothing(rig: Rig) -> None:
    decision = rig.check(refund_call("c1"), guard=rig.guard_with(strict=False))
    assert decision.allowed and decision.warnings and rig.queue.all() == []


class BrokenQueue:
    def __getattr__(self, name: str) -> object:
        def fail(*args: object, **kwargs: object) -> object:
            raise OSError("disk on fire")

        return fail


def test_an_unreachable_queue_blocks(rig: Rig) -> None:
    decision = rig.check(refund_call("c1"), guard=rig.guard_with(approvals=BrokenQueue()))
    assert (decision.outcome, decision.stage) == ("block", "approver")
    assert "disk on fire" in (decision.error or "")


def test_two_retries_racing_spend_the_approval_once(rig: Rig) -> None:
    import threading

    waiting = escalate(rig)
    assert waiting.approval_id is not None
    rig.queue.approve(waiting.approval_id, "alice")
    from .conftest import dialogue

    results: list[Decision] = []
    calls = [refund_call(f"r{i}") for i in range(6)]

    def one(index: int) -> None:
        results.append(rig.guard.check(calls[index], dialogue(calls[index])))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(d.allowed for d in results) == 1 and len(results) == 6


def test_the_async_check_escalates_and_spends_the_same_way(rig: Rig) -> None:
    import asyncio

    from .conftest import dialogue

    first = asyncio.run(rig.guard.acheck(refund_call("c1"), dialogue(refund_call("c1"))))
    assert first.awaiting_approval and first.approval_id is not None
    rig.queue.approve(first.approval_id, "alice")
    again = asyncio.run(rig.guard.acheck(refund_call("c2"), dialogue(refund_call("c2"))))
    assert again.allowed and again.approval_id == first.approval_id


@pytest.mark.parametrize("amount", [6000, "800", -800, True, float("nan")])
def test_an_amount_no_person_may_approve_is_blocked_not_queued(rig: Rig, amount: object) -> None:
    decision = rig.check(refund_call("c1", amount=amount))  # type: ignore[arg-type]
    assert decision.outcome == "block" and decision.approval_id is None
    assert rig.queue.all() == [] and rig.refund.calls == []


def _looked_up(call: ToolCall, user_id: str) -> Trajectory:
    """A dialogue in which the agent authenticated ``user_id`` by a lookup, then made ``call``."""
    lookup = ToolCall(id=f"lookup-{call.id}", name="get_user_details", arguments={"user_id": user_id})
    return Trajectory(
        messages=[
            Message(role="user", content="Refund my order."),
            Message(role="assistant", tool_calls=[lookup]),
            Message(role="tool", tool_call_id=lookup.id, name=lookup.name, content=json.dumps({"user_id": user_id})),
            Message(role="assistant", tool_calls=[call]),
        ]
    )


def _with_principal_lookup(rig: Rig) -> Guard:
    """A guard given no principal: the checklist says the user is who get_user_details returned."""
    data = checklist_data()
    data["principal"] = {"tool": "get_user_details", "field": "user_id"}
    data["tools"]["get_user_details"] = {"mutating": False}
    return rig.guard_with(checklist=Checklist.model_validate(data), principal=None)


def test_the_request_records_the_principal_the_gate_took_from_the_dialogue(rig: Rig) -> None:
    guard = _with_principal_lookup(rig)
    waiting = guard.check(refund_call("c1"), _looked_up(refund_call("c1"), "u-9"))
    assert waiting.awaiting_approval and waiting.approval_id is not None
    request = rig.queue.get(waiting.approval_id)
    assert request is not None and request.principal == "u-9"
    rig.queue.approve(waiting.approval_id, "alice")
    other_user = guard.check(refund_call("c2"), _looked_up(refund_call("c2"), "u-10"))
    assert other_user.awaiting_approval and other_user.approval_id != waiting.approval_id
    assert guard.check(refund_call("c3"), _looked_up(refund_call("c3"), "u-9")).approval_id == waiting.approval_id


def test_with_no_known_principal_a_person_cannot_approve_and_nothing_is_queued(rig: Rig) -> None:
    guard = _with_principal_lookup(rig)
    decision = guard.check(refund_call("c1"), Trajectory(messages=[Message(role="assistant",
                                                                           tool_calls=[refund_call("c1")])]))  # fmt: skip
    assert (decision.outcome, decision.stage, decision.approval_id) == ("block", "approver", None)
    assert "no user is authenticated" in (decision.message or "")
    assert rig.queue.all() == []


def test_an_approval_without_a_principal_never_matches_an_unknown_principal(rig: Rig) -> None:
    """None == None is not the same user: an old request recorded without a principal lets nothing through."""
    from .conftest import dialogue

    ownerless = rig.queue.submit(
        new_request(
            CHECKLIST,
            refund_call("c1"),
            Decision.block("gate", "needs approval"),
            dialogue(refund_call("c1")),
            principal=None,
            ttl_s=3600,
        )  # fmt: skip
    )
    rig.queue.approve(ownerless.id, "alice")
    assert matching(rig.queue, refund_call("c2"), principal=None, version=approval_version(CHECKLIST)) == []
    decision = rig.check(refund_call("c2"), guard=rig.guard_with(principal=None))
    assert not decision.allowed and rig.refund.calls == []
    assert rig.queue.get(ownerless.id).status == "approved"  # type: ignore[union-attr]
