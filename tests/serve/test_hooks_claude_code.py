"""``POST /v1/hooks/claude-code``: the command hook's semantics over HTTP, and never an error status.

Claude Code runs the call when an http hook answers non-2xx, so every failure is a 200 deny.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.claude_code.shapes import Transcript, post, pre, use

PATH = "/v1/hooks/claude-code"
TRANSACTION = "T1"


def decision_of(response: Any) -> str | None:
    assert response.status_code == 200
    return response.json().get("hookSpecificOutput", {}).get("permissionDecision")


@pytest.fixture
def t(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Transcript:
    monkeypatch.setenv("POLICYGUARD_HOOK_TRANSCRIPTS", str(tmp_path / "projects"))
    (tmp_path / "projects").mkdir()
    transcript = Transcript(tmp_path / "projects" / "session.jsonl")
    transcript.user(f"Please refund 120 USD for {TRANSACTION}, the item arrived damaged.")
    return transcript


READS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("toolu_r1", "get_refund_policy", {"transaction_id": TRANSACTION}, {"transaction_id": TRANSACTION, "refund_allowed": True}),
    ("toolu_r2", "get_transaction", {"transaction_id": TRANSACTION}, {"transaction_id": TRANSACTION, "captured": 200, "currency": "USD"}),
    ("toolu_r3", "get_approval", {"approval_id": ""}, {"approval_id": "", "status": "none"}),
]  # fmt: skip
"""The reads a refund of T1 needs, each as (tool_use_id, tool, arguments, result)."""


def reads(client: Any, t: Transcript) -> None:
    for call_id, name, args, result in READS:
        t.assistant(use(call_id, name, **args))
        assert decision_of(client.post(PATH, json=pre(t, call_id, name, **args))) is None
        t.result(call_id, result)
        assert client.post(PATH, json=post(t, call_id, name, json.dumps(result), **args)).json() == {}


def refund(amount: float) -> dict[str, Any]:
    return {
        "transaction_id": TRANSACTION,
        "amount": amount,
        "currency": "USD",
        "idempotency_key": f"refund:{TRANSACTION}",
    }


def test_a_refund_after_the_reads_passes_and_one_over_the_captured_amount_is_denied(
    make_client: Callable[..., Any], t: Transcript
) -> None:
    client = make_client()
    reads(client, t)
    t.assistant(use("toolu_w1", "issue_refund", **refund(500)))
    assert decision_of(client.post(PATH, json=pre(t, "toolu_w1", "issue_refund", **refund(500)))) == "deny"
    t.assistant(use("toolu_w2", "issue_refund", **refund(120)))
    assert decision_of(client.post(PATH, json=pre(t, "toolu_w2", "issue_refund", **refund(120)))) is None


def test_a_wrong_token_is_a_200_deny(make_client: Callable[..., Any], t: Transcript) -> None:
    client = make_client(token="s3cret")
    assert (
        decision_of(client.post(PATH, json=pre(t, "toolu_r1", "get_transaction", transaction_id=TRANSACTION))) == "deny"
    )
    allowed = client.post(PATH, json=pre(t, "toolu_r1", "get_transaction", transaction_id=TRANSACTION),
                          headers={"Authorization": "Bearer s3cret"})  # fmt: skip
    assert decision_of(allowed) is None


@pytest.mark.parametrize(
    "body", [b"{broken", b"[]", json.dumps({"session_id": "s", "hook_event_name": "PreToolUse"}).encode()]
)
def test_a_body_that_cannot_be_read_is_a_200_deny(make_client: Callable[..., Any], body: bytes) -> None:
    response = make_client().post(PATH, content=body, headers={"content-type": "application/json"})
    assert decision_of(response) == "deny"


def test_a_transcript_outside_the_transcripts_folder_is_not_read(
    make_client: Callable[..., Any], t: Transcript, tmp_path: Path
) -> None:
    event = {**pre(t, "toolu_r1", "get_transaction", transaction_id=TRANSACTION), "transcript_path": "/etc/passwd"}
    response = make_client().post(PATH, json=event)
    assert decision_of(response) == "deny"
    assert "root:" not in response.text


def test_the_server_keeps_a_sessions_record_between_hook_events(
    make_client: Callable[..., Any], t: Transcript, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each event reads from the store only what was added since the server's last look, never the whole record."""
    client = make_client()
    store = client.service.base.sessions
    reads_from: list[int] = []
    session_events = store.session_events

    def counted(session_id: str, after: int = 0) -> Any:
        reads_from.append(after)
        return session_events(session_id, after)

    monkeypatch.setattr(store, "session_events", counted)
    reads(client, t)
    t.assistant(use("toolu_w1", "issue_refund", **refund(120)))
    assert decision_of(client.post(PATH, json=pre(t, "toolu_w1", "issue_refund", **refund(120)))) is None
    assert reads_from and reads_from.count(0) <= 1, reads_from  # the first look only starts from the beginning
