"""Shared helpers for backend tests: a request shaped like the verifier's."""

from __future__ import annotations

import pytest

from policyguard.verifier.models.base import ModelRequest, PromptPart

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["PASS", "BLOCK"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}


@pytest.fixture
def request_() -> ModelRequest:
    return ModelRequest(
        parts=[
            PromptPart(role="system", content="INSTRUCTIONS AND POLICY", cache=True),
            PromptPart(role="system", content="CHECKLIST FOR TOOL", cache=True),
            PromptPart(role="user", content="DIALOGUE AND PENDING CALL", cache=False),
        ],
        response_schema=SCHEMA,
        schema_name="verifier_output",
        max_output_tokens=777,
        timeout_s=9.0,
    )
