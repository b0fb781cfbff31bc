"""The review console, as a reviewer and as an attacker use it (in process, Starlette's TestClient).

What it guarantees: nothing without logging in with the token; a decision is a
POST carrying the session's CSRF token, recorded once; everything shown is
escaped; pages carry a strict CSP.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from policyguard.approvals.queue import SQLiteApprovalQueue
from policyguard.audit.trace import Trace
from policyguard.review.app import create_app
from policyguard.review.auth import Sessions, token_problem

from .conftest import TOKEN, log_in, make_request


def test_every_page_sends_an_unauthenticated_visitor_to_login(client: TestClient, queue: SQLiteApprovalQueue) -> None:
    item = queue.submit(make_request())
    for path in ("/queue", f"/requests/{item.id}", "/decisions", "/decisions/0/1"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/login", path


def test_a_decision_without_a_session_is_refused_and_changes_nothing(
    client: TestClient, queue: SQLiteApprovalQueue
) -> None:
    item = queue.submit(make_request())
    response = client.post(f"/requests/{item.id}/approve", data={"csrf": "x"})
    assert response.status_code == 401
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


def test_a_wrong_token_does_not_log_in(client: TestClient) -> None:
    response = client.post("/login", data={"reviewer": "Eve", "token": "guess-guess-guess"}, follow_redirects=False)
    assert response.status_code == 401
    assert "wrong token" in response.text
    assert "pg_review" not in response.headers.get("set-cookie", "")


def test_login_sets_an_httponly_samesite_strict_session_cookie(client: TestClient) -> None:
    response = client.post("/login", data={"reviewer": "Dana", "token": TOKEN}, follow_redirects=False)
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_the_queue_lists_pending_requests_oldest_first_with_amount_and_principal(
    client: TestClient, queue: SQLiteApprovalQueue
) -> None:
    older = queue.submit(make_request(700.0, order="ORD-OLD", created_at=time.time() - 7200))
    newer = queue.submit(make_request(950.0, order="ORD-NEW"))
    log_in(client)
    page = client.get("/queue").text
    assert page.index(older.id) < page.index(newer.id)
    assert "amount = 950.0" in page and "user-7" in page and "2h" in page
    assert "approved_above_500" in page


def test_the_detail_page_shows_the_call_requirements_evidence_policy_sentence_and_dialogue(
    client: TestClient, queue: SQLiteApprovalQueue
) -> None:
    item = queue.submit(make_request())
    log_in(client)
    page = client.get(f"/requests/{item.id}").text
    for text in ("refund_payment", "NOT_MET", "amount 900 &gt; 500, no approval",
                 "Refunds over $500 require supervisor approval.", "Please refund my order ORD-1.",
                 "Waiting for a supervisor", item.args_sha256, "refund-policy@3", "approvable"):  # fmt: skip
        assert text in page, text


def test_approve_records_the_reviewer_and_reason_once(client: TestClient, queue: SQLiteApprovalQueue) -> None:
    item = queue.submit(make_request())
    csrf = log_in(client, "Dana")
    response = client.post(f"/requests/{item.id}/approve", data={"csrf": csrf, "reason": "verified by phone"},
                           follow_redirects=False)  # fmt: skip
    assert response.status_code == 303
    decided = queue.get(item.id)
    assert decided is not None
    assert (decided.status, decided.reviewer, decided.reason) == ("approved", "Dana", "verified by phone")
    again = client.post(f"/requests/{item.id}/deny", data={"csrf": csrf})
    assert again.status_code == 409 and "approved" in again.text
    assert queue.get(item.id).status == "approved"  # type: ignore[union-attr]


def test_deny_is_final(client: TestClient, queue: SQLiteApprovalQueue) -> None:
    item = queue.submit(make_request())
    csrf = log_in(client)
    assert client.post(f"/requests/{item.id}/deny", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    assert client.post(f"/requests/{item.id}/approve", data={"csrf": csrf}).status_code == 409
    assert queue.get(item.id).status == "denied"  # type: ignore[union-attr]


@pytest.mark.parametrize("action", ["Approve", "APPROVE", "reject", "approve ", "denied", "x"])
def test_an_unknown_action_is_404_and_decides_nothing(
    client: TestClient, queue: SQLiteApprovalQueue, action: str
) -> None:
    item = queue.submit(make_request())
    csrf = log_in(client)
    response = client.post(f"/requests/{item.id}/{action}", data={"csrf": csrf})
    assert response.status_code == 404
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize("csrf", [None, "", "wrong-token", "x" * 43])
def test_a_decision_without_the_sessions_csrf_token_is_refused(
    client: TestClient, queue: SQLiteApprovalQueue, csrf: str | None
) -> None:
    item = queue.submit(make_request())
    log_in(client)
    data = {} if csrf is None else {"csrf": csrf}
    response = client.post(f"/requests/{item.id}/approve", data=data)
    assert response.status_code == 403
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


def test_another_sessions_csrf_token_does_not_work(queue: SQLiteApprovalQueue) -> None:
    app = create_app(queue, token=TOKEN)
    item = queue.submit(make_request())
    with TestClient(app, base_url="http://127.0.0.1") as alice, TestClient(app, base_url="http://127.0.0.1") as bob:
        alice_csrf = log_in(alice, "Alice")
        log_in(bob, "Bob")
        assert bob.post(f"/requests/{item.id}/approve", data={"csrf": alice_csrf}).status_code == 403
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


def test_a_get_never_decides(client: TestClient, queue: SQLiteApprovalQueue) -> None:
    item = queue.submit(make_request())
    log_in(client)
    assert client.get(f"/requests/{item.id}/approve").status_code == 405
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        ("csrf=a&csrf=b", "application/x-www-form-urlencoded", 400),
        ('{"csrf": "a"}', "application/json", 415),
        ("reason=" + "r" * 20_000, "application/x-www-form-urlencoded", 413),
        (b"\xff\xfe", "application/x-www-form-urlencoded", 400),
    ],
)
def test_unreadable_forms_are_refused_with_a_reason(
    client: TestClient, queue: SQLiteApprovalQueue, body: str | bytes, content_type: str, status: int
) -> None:
    item = queue.submit(make_request())
    log_in(client)
    response = client.post(f"/requests/{item.id}/approve", content=body, headers={"content-type": content_type})
    assert response.status_code == status
    assert "Traceback" not in response.text
    assert queue.get(item.id).status == "pending"  # type: ignore[union-attr]


def test_deciding_an_unknown_or_expired_request_says_so(client: TestClient, queue: SQLiteApprovalQueue) -> None:
    expired = queue.submit(make_request(expires_at=time.time() - 1))
    csrf = log_in(client)
    assert client.post("/requests/apr-nope/approve", data={"csrf": csrf}).status_code == 404
    response = client.post(f"/requests/{expired.id}/approve", data={"csrf": csrf})
    assert response.status_code == 409 and "expired" in response.text


def test_text_from_agents_and_users_is_shown_as_text_never_as_markup(
    client: TestClient, queue: SQLiteApprovalQueue
) -> None:
    attack = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    item = queue.submit(make_request(tool="refund<b>", order=attack, principal=attack, remediation=attack))
    log_in(client)
    for path in ("/queue", f"/requests/{item.id}"):
        page = client.get(path).text
        assert "<script>alert(1)" not in page and "<img src=x" not in page and "refund<b>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_every_page_carries_a_strict_content_security_policy(client: TestClient) -> None:
    for response in (client.get("/login"), client.get("/static/review.css")):
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert "script-src" not in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["cache-control"] == "no-store"


def test_logout_needs_the_csrf_token_and_ends_the_session(client: TestClient) -> None:
    csrf = log_in(client)
    assert client.post("/logout", data={"csrf": "wrong"}).status_code == 403
    assert client.get("/queue", follow_redirects=False).status_code == 200
    client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert client.get("/queue", follow_redirects=False).status_code == 303


def test_a_short_or_missing_login_token_is_refused_at_start() -> None:
    assert token_problem(None) is not None and token_problem("short") is not None
    with pytest.raises(ValueError, match="at least 16"):
        Sessions("short")


def test_sessions_expire_after_inactivity() -> None:
    now = [0.0]
    sessions = Sessions(TOKEN, ttl_s=60, clock=lambda: now[0])
    sid = sessions.login(TOKEN, "Dana")
    assert sessions.get(sid) is not None
    now[0] = 61.0
    assert sessions.get(sid) is None


# -- the decision browser --------------------------------------------------------------------------


def _trace(path: Path) -> Path:
    with Trace(path) as trace:
        common = {"tool": "refund_payment", "args_sha256": "ab" * 32}
        trace.emit("submit", call_id="c1", **common)
        trace.emit("deny", call_id="c1", **common)
        trace.emit("decision", call_id="c1", outcome="block", stage="gate", remediation="Ask a supervisor.",
                   requirements=[{"id": "approved_above_500", "status": "NOT_MET", "evidence": "900 > 500"}], **common)  # fmt: skip
        trace.emit("execute", call_id="c1", **common)  # executed although denied: an INV-1 finding
        trace.emit("submit", call_id="c2", tool="get_order", args_sha256="cd" * 32)
        trace.emit("decision", call_id="c2", tool="get_order", args_sha256="cd" * 32, outcome="allow",
                   stage="read_only", requirements=[])  # fmt: skip
    return path


def test_the_decision_browser_filters_by_outcome_tool_and_failed_requirement(
    queue: SQLiteApprovalQueue, tmp_path: Path
) -> None:
    trace = _trace(tmp_path / "run.jsonl")
    with TestClient(create_app(queue, token=TOKEN, trace_files=[trace]), base_url="http://127.0.0.1") as client:
        log_in(client)
        everything = client.get("/decisions").text
        assert "2 decision(s)" in everything
        assert "1 decision(s)" in client.get("/decisions", params={"outcome": "block"}).text
        assert "1 decision(s)" in client.get("/decisions", params={"tool": "get_order"}).text
        only = client.get("/decisions", params={"requirement": "approved_above_500"}).text
        assert "1 decision(s)" in only and "refund_payment" in only


def test_inv1_findings_are_highlighted_on_the_list_and_the_detail(queue: SQLiteApprovalQueue, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "run.jsonl")
    with TestClient(create_app(queue, token=TOKEN, trace_files=[trace]), base_url="http://127.0.0.1") as client:
        log_in(client)
        listing = client.get("/decisions").text
        assert "INV-1 finding(s)" in listing and "denied" in listing
        record_t = next(r["t"] for r in map(json.loads, trace.read_text().splitlines()) if r["event"] == "decision")
        detail = client.get(f"/decisions/0/{record_t}").text
        assert "INV-1 findings for this call" in detail and "Ask a supervisor." in detail
        assert client.get("/decisions/5/1").status_code == 404
        assert client.get("/decisions/0/999").status_code == 404


def test_an_unreadable_trace_is_reported_on_the_page_not_as_a_crash(queue: SQLiteApprovalQueue, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"v": "policyguard.trace/1", "event": "decision", "t": 1}\nnot json\n')
    with TestClient(create_app(queue, token=TOKEN, trace_files=[broken]), base_url="http://127.0.0.1") as client:
        log_in(client)
        page = client.get("/decisions")
        assert page.status_code == 200
        assert "broken.jsonl:2: not JSON" in page.text


def test_the_decision_detail_shows_the_reads_the_guard_made(queue: SQLiteApprovalQueue, tmp_path: Path) -> None:
    from policyguard import Guard, HardGate
    from policyguard.guard.fetching import ToolTable
    from tests import fetchshop as shop

    path = tmp_path / "fetched.jsonl"
    cl = shop.checklist()
    with Trace(path) as trace:
        guard = Guard(cl, shop.POLICY, gate=HardGate(cl), allow_unverified=True, trace=trace)
        fetch = ToolTable({"get_order": shop.get_order})
        assert guard.check(shop.cancel("O1"), shop.signed_in(), fetch=fetch).outcome == "allow"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    (event,) = [r for r in records if r["event"] == "fetch"]
    record_t = next(r["t"] for r in records if r["event"] == "decision")
    with TestClient(create_app(queue, token=TOKEN, trace_files=[path]), base_url="http://127.0.0.1") as client:
        log_in(client)
        detail = client.get(f"/decisions/0/{record_t}").text
    assert "Reads the guard made" in detail and "get_order" in detail and event["result_sha256"] in detail
    assert "INV-1 findings" not in detail  # a read the guard made is no finding
