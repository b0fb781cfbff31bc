"""Shared pieces of the review console tests: a queue with requests, and a logged-in client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from policyguard.approvals.queue import ApprovalRequest, DialogueLine, RequirementView, SQLiteApprovalQueue  # noqa: E402
from policyguard.approvals.url import open_approvals  # noqa: E402
from policyguard.review.app import create_app  # noqa: E402

TOKEN = "review-token-0123456789abcdef"


def make_request(
    amount: float = 900.0, *, tool: str = "refund_payment", order: str = "ORD-1", **extra: object
) -> ApprovalRequest:
    fields: dict[str, object] = {
        "call_id": f"call-{order}",
        "tool": tool,
        "arguments": {"order_id": order, "amount": amount},
        "args_sha256": "ab" * 32,
        "principal": "user-7",
        "policy_version": "refund-policy@3",
        "requirements": [
            RequirementView(id="approved_above_500", status="NOT_MET", evidence="amount 900 > 500, no approval",
                            judged_by="gate", text="Refunds above $500 need a supervisor.",
                            source="Refunds over $500 require supervisor approval.", approvable=True),
            RequirementView(id="order_owned", status="MET", evidence="order ORD-1 belongs to user-7", judged_by="gate"),
        ],
        "remediation": "Waiting for a supervisor; do not retry with other arguments.",
        "dialogue": [DialogueLine(role="user", content="Please refund my order ORD-1."),
                     DialogueLine(role="assistant", content="refund_payment(order_id=ORD-1, amount=900)")],
        "expires_at": time.time() + 3600,
    }  # fmt: skip
    fields.update(extra)
    return ApprovalRequest.model_validate(fields)


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[SQLiteApprovalQueue]:
    q = open_approvals(f"sqlite:///{tmp_path / 'guard.db'}")
    yield q
    q.close()


@pytest.fixture
def client(queue: SQLiteApprovalQueue) -> Iterator[TestClient]:
    with TestClient(create_app(queue, token=TOKEN), base_url="http://127.0.0.1") as c:
        yield c


def log_in(client: TestClient, reviewer: str = "Dana") -> str:
    """Logs ``client`` in; returns the session's CSRF token (read from the queue page's logout form)."""
    response = client.post("/login", data={"reviewer": reviewer, "token": TOKEN}, follow_redirects=False)
    assert response.status_code == 303, response.text
    page = client.get("/queue").text
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]
