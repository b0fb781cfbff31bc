"""Health answers: a status for anyone, details for the token holder, never the store's address or its driver's error."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from policyguard.enforcement.store import LedgerUnavailable

TOKEN = "s3cret-token-for-tests-0123456789"
BEARER = {"authorization": f"Bearer {TOKEN}"}
# what psycopg says about an unreachable server, behind the store's (redacted) URL
DRIVER_ERROR = (
    "postgresql://guard:***@db.internal:5432/policies: connection failed: "
    'connection to server at "10.1.2.3", port 5432 failed: FATAL: password authentication failed for user "guard"'
)
SECRETS = ("db.internal", "10.1.2.3", "5432", "guard", "policies", "password", "FATAL", "LedgerUnavailable")


class Unreachable:
    def is_denied(self, call_id: str) -> bool:
        raise LedgerUnavailable(DRIVER_ERROR)


def test_with_a_token_set_an_anonymous_readiness_probe_gets_the_status_and_nothing_else(make_client: Any) -> None:
    client = make_client(token=TOKEN)
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"ready": True}
    client.service.store.inner = Unreachable()
    unready = client.get("/readyz")
    assert unready.status_code == 503 and unready.json() == {"ready": False}


def test_with_a_token_set_the_token_holder_also_gets_the_replica_checklist_and_store_state(make_client: Any) -> None:
    client = make_client(token=TOKEN)
    body = client.get("/readyz", headers=BEARER).json()
    assert body == {"ready": True, "replica": "test", "checklist": "refund-sandbox",
                    "policy_version": client.service.base.checklist.policy.version, "grants": True, "store": "ok"}  # fmt: skip


@pytest.mark.parametrize("token", [None, TOKEN], ids=["loopback without token", "token holder"])
def test_a_failing_store_is_named_unreachable_without_its_url_or_the_drivers_error(
    make_client: Any, token: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(token=token)
    client.service.store.inner = Unreachable()
    with caplog.at_level(logging.WARNING, logger="policyguard.serve"):
        unready = client.get("/readyz", headers=BEARER if token else {})
    assert unready.status_code == 503
    assert unready.json()["ready"] is False and unready.json()["store"] == "unreachable"
    assert not [word for word in SECRETS if word in unready.text]
    assert DRIVER_ERROR in caplog.text  # the operator finds the reason in the server's log


def test_a_store_that_does_not_answer_in_time_is_named_timeout(
    make_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from policyguard.serve import app

    monkeypatch.setattr(app, "READY_TIMEOUT_S", 0.2)
    client = make_client()
    release = threading.Event()

    class Hanging:
        def is_denied(self, call_id: str) -> bool:
            release.wait(5)
            return False

    client.service.store.inner = Hanging()
    try:
        with caplog.at_level(logging.WARNING, logger="policyguard.serve"):
            unready = client.get("/readyz")
    finally:
        release.set()
    assert unready.status_code == 503 and unready.json()["store"] == "timeout"
    assert "did not answer within 0.2 s" in caplog.text


def test_with_a_token_set_the_liveness_probe_names_no_replica_to_anonymous_callers(make_client: Any) -> None:
    client = make_client(token=TOKEN)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/healthz", headers=BEARER).json() == {"status": "ok", "replica": "test"}
