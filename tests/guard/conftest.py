from __future__ import annotations

import textwrap

import pytest

from policyguard import parse_checklist
from policyguard.trajectory.canonical import policy_version

POLICY = "Refunds need a read of the order first. Never refund more than was captured.\n"


@pytest.fixture
def policy_text() -> str:
    return POLICY


@pytest.fixture
def checklist():  # type: ignore[no-untyped-def]
    return parse_checklist(
        textwrap.dedent(
            f"""
            policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
            tools:
              get_order: {{mutating: false}}
              issue_refund:
                requirements:
                  - id: read-order
                    text: The order was read first.
                    kind: data
                    source: Refunds need a read of the order first.
                  - id: user-confirmed
                    text: The user confirmed.
                    kind: procedural
                    source: Never refund more than was captured.
            """
        ),
        file="inline.yaml",
    )
