"""`policyguard approvals list|show|approve|deny --store URL`: a person reads the queue and decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyguard.audit.inv1 import audit_file
from policyguard.checklist.schema import Checklist
from policyguard.cli import main
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .conftest import Rig, checklist_data, refund_call


def waiting(rig: Rig, call_id: str = "c1", **kw: object) -> str:
    decision = rig.check(refund_call(call_id, **kw))  # type: ignore[arg-type]
    assert decision.approval_id is not None
    return decision.approval_id


def url(rig: Rig) -> str:
    return f"sqlite:///{rig.path}"


def test_list_shows_pending_requests_oldest_first(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    first = waiting(rig, "c1", order="O1")
    rig.history = None
    second = waiting(rig, "c2", order="O2")
    assert main(["approvals", "list", "--store", url(rig)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [first, second]
    assert "issue_refund" in out[0] and '"amount": 800' in out[0] and "failed=effect-approval" in out[0]


def test_list_json_and_status_filter(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    request_id = waiting(rig)
    assert main(["approvals", "deny", request_id, "--store", url(rig), "--reviewer", "bob"]) == 0
    capsys.readouterr()
    assert main(["approvals", "list", "--store", url(rig), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["approvals", "list", "--store", url(rig), "--status", "denied", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["id"], row["status"], row["reviewer"]) == (request_id, "denied", "bob")


def test_show_prints_requirements_evidence_policy_and_dialogue(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    request_id = waiting(rig)
    assert main(["approvals", "show", request_id, "--store", url(rig)]) == 0
    out = capsys.readouterr().out
    assert "NOT_MET        effect-approval (approvable)" in out
    assert "policy: 'Refunds go only to known orders (ids start with O).'" in out
    assert "evidence: check holds" in out and "user: Refund my order." in out


def test_approve_via_the_cli_lets_the_retried_call_run_once(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = waiting(rig)
    trace = tmp_path / "review.jsonl"
    code = main(
        ["approvals", "approve", request_id, "--store", url(rig), "--reason", "ok", "--reviewer", "alice"]
        + ["--trace", str(trace)]
    )
    assert code == 0 and f"{request_id}: approved by alice (ok)" in capsys.readouterr().out
    decision, result = rig.attempt(refund_call("c2"))
    assert result is not None and result.executed and len(rig.refund.calls) == 1
    [event] = [json.loads(line) for line in trace.read_text().splitlines()]
    assert (event["event"], event["approval_id"], event["reviewer"]) == ("approve", request_id, "alice")
    assert audit_file(trace).ok


def test_a_second_decision_is_refused_with_exit_1(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    request_id = waiting(rig)
    assert main(["approvals", "approve", request_id, "--store", url(rig), "--reviewer", "alice"]) == 0
    assert main(["approvals", "deny", request_id, "--store", url(rig), "--reviewer", "bob"]) == 1
    assert main(["approvals", "approve", request_id, "--store", url(rig), "--reviewer", "bob"]) == 1
    err = capsys.readouterr().err
    assert "deny refused" in err and "approved, not pending" in err
    assert rig.queue.get(request_id).reviewer == "alice"  # type: ignore[union-attr]


def test_unknown_ids_and_bad_urls(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["approvals", "show", "apr-nope", "--store", url(rig)]) == 1
    assert main(["approvals", "approve", "apr-nope", "--store", url(rig), "--reviewer", "a"]) == 1
    assert main(["approvals", "list", "--store", "mysql://x"]) == 2
    err = capsys.readouterr().err
    assert "no approval request 'apr-nope'" in err and "unknown scheme 'mysql'" in err


def test_the_reviewer_defaults_to_the_environment(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POLICYGUARD_REVIEWER", "carol")
    request_id = waiting(rig)
    assert main(["approvals", "approve", request_id, "--store", url(rig)]) == 0
    assert rig.queue.get(request_id).reviewer == "carol"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "argv",
    [["list"], ["list", "--json"], ["show", "apr-1"], ["approve", "apr-1", "--reviewer", "a"], ["deny", "apr-1"]],
    ids=lambda argv: " ".join(argv),
)
def test_a_mistyped_store_path_is_an_error_and_nothing_is_created(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once: `approvals list --store sqlite:///gaurd.db` created gaurd.db and listed an empty queue, exit 0."""
    missing = tmp_path / "gaurd.db"
    assert main(["approvals", *argv, "--store", f"sqlite:///{missing}"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("policyguard: error:") and str(missing) in line and "no such store" in line
    assert list(tmp_path.iterdir()) == []


def test_list_names_unverified_requirements_apart_from_failed_ones(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once: a requirement nobody judged (gate only, no verifier) was listed under `failed=` for the reviewer."""
    data = checklist_data()
    data["tools"]["issue_refund"]["requirements"].append(
        {
            "id": "refund.user_asked",
            "text": "The user asked for this refund.",
            "kind": "procedural",
            "source": "Every refund states a reason.",
        }
    )
    guard = rig.guard_with(checklist=Checklist.model_validate(data))
    decision = rig.check(refund_call("c1"), guard)
    assert decision.approval_id is not None
    assert main(["approvals", "list", "--store", url(rig)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert "failed=effect-approval " in line + " " and line.endswith("unverified=refund.user_asked")


def test_list_shows_the_principal_the_checklist_established(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    """With no `principal=` the request carries the user the checklist's lookup read, never `principal=-`."""
    data = checklist_data()
    data["principal"] = {"tool": "get_user_details", "field": "user_id"}
    data["tools"]["get_user_details"] = {"mutating": False}
    guard = rig.guard_with(checklist=Checklist.model_validate(data), principal=None)
    read = ToolCall(id="u1", name="get_user_details", arguments={"user_id": "mia_1"})
    rig.history = Trajectory(
        messages=[
            Message(role="user", content="I am mia_1; refund my order."),
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="u1", name="get_user_details", content='{"user_id": "mia_1"}'),
        ]
    )
    assert rig.check(refund_call("c1"), guard).approval_id is not None
    assert main(["approvals", "list", "--store", url(rig)]) == 0
    assert "principal=mia_1 " in capsys.readouterr().out
