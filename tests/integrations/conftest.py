"""A refund policy and its checklist, written to files for Guard.from_files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from policyguard.canonical import policy_version

POLICY = "Refunds need a read of the order first. Never refund more than 100 USD.\n"
CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
    tools:
      get_order: {{mutating: false}}
      issue_refund:
        requirements:
          - id: refund-ceiling
            text: A refund is at most 100 USD.
            kind: data
            source: Never refund more than 100 USD.
            check: args.amount <= 100
            examples:
              - {{args: {{amount: 80}}, complies: true}}
              - {{args: {{amount: 500}}, complies: false}}
    """
)


@pytest.fixture
def guard_files(tmp_path: Path) -> tuple[Path, Path]:
    policy = tmp_path / "policy.md"
    checklist = tmp_path / "checklist.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    checklist.write_text(CHECKLIST, encoding="utf-8")
    return policy, checklist
