"""What a server writes to its log is bounded by its configuration, not by its traffic.

Gate only (``--model none``), an allowed call may have requirements nobody verified; the library
names them once per set of requirements. A server builds one guard per request and still names
them once: a log that grows by a line per decision fills the pipe of a supervisor that does not
read it (64 KiB: ~290 decisions), and from then on every decision waits on the log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from .conftest import CHECKLIST, POLICY, check_body, unique

PROCEDURAL = """
      - id: refund.customer_asked
        text: The customer asked for this refund in the conversation.
        kind: procedural
        source: "Every attempt to refund a transaction uses the idempotency key"
"""


def test_the_unverified_warning_is_logged_once_per_process_not_once_per_request(
    make_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checklist = tmp_path / "checklist.yaml"
    checklist.write_text(CHECKLIST.read_text(encoding="utf-8").rstrip("\n") + PROCEDURAL, encoding="utf-8")
    (tmp_path / "policy.md").write_text(POLICY.read_text(encoding="utf-8"), encoding="utf-8")
    client = make_client(checklist=checklist, policy=tmp_path / "policy.md")
    with caplog.at_level(logging.WARNING, logger="policyguard"):
        for _ in range(5):
            decision = client.post("/v1/check", json=check_body(unique("T"))).json()
            assert decision["outcome"] == "allow" and decision["unverified"] == ["refund.customer_asked"], decision
    warnings = [record for record in caplog.records if "refund.customer_asked" in record.getMessage()]
    assert len(warnings) == 1, [record.getMessage() for record in warnings]
