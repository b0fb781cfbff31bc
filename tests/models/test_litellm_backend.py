"""LiteLLMModel: payload per provider, offline end to end through `mock_response`, error mapping.

The autouse ``no_network`` fixture fails any test here that opens a socket, so
these tests also prove that ``mock_response`` makes no network call.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from policyguard import Message, ModelError, ToolCall, Trajectory, parse_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.llm import LLMVerifier
from policyguard.verifier.models.base import ModelRequest
from policyguard.verifier.models.litellm_backend import LiteLLMModel, is_claude, map_litellm_error

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

EPHEMERAL = {"type": "ephemeral"}


def test_openai_payload_uses_a_json_schema_response_format(request_: ModelRequest) -> None:
    payload = LiteLLMModel("openai/gpt-4o-mini", temperature=0).payload(request_)
    assert payload == {
        "model": "openai/gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "INSTRUCTIONS AND POLICY"},
            {"role": "system", "content": "CHECKLIST FOR TOOL"},
            {"role": "user", "content": "DIALOGUE AND PENDING CALL"},
        ],
        "max_tokens": 777,
        "timeout": 9.0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verifier_output", "schema": request_.response_schema, "strict": True},
        },
        "temperature": 0,
    }


def test_claude_payload_marks_the_cached_prefix(request_: ModelRequest) -> None:
    messages = LiteLLMModel("anthropic/claude-sonnet-4-5").payload(request_)["messages"]
    assert messages[0] == {
        "role": "system",
        "content": [{"type": "text", "text": "INSTRUCTIONS AND POLICY", "cache_control": EPHEMERAL}],
    }
    assert messages[1]["content"][0]["cache_control"] == EPHEMERAL
    assert messages[2] == {"role": "user", "content": "DIALOGUE AND PENDING CALL"}


def test_models_without_schema_support_get_a_plain_json_instruction(request_: ModelRequest) -> None:
    model = "openai/gpt-3.5-turbo"
    assert not litellm.supports_response_schema(model=model)
    payload = LiteLLMModel(model).payload(request_)
    assert "response_format" not in payload
    assert payload["messages"][-1]["role"] == "user"
    assert "JSON schema" in payload["messages"][-1]["content"]


def test_a_failing_capability_lookup_means_no_schema(monkeypatch: pytest.MonkeyPatch, request_: ModelRequest) -> None:
    def broken(**kwargs: object) -> bool:
        raise RuntimeError("lookup failed")

    monkeypatch.setattr(litellm, "supports_response_schema", broken)
    assert "response_format" not in LiteLLMModel("openai/gpt-4o-mini").payload(request_)


def test_is_claude() -> None:
    assert is_claude("anthropic/claude-sonnet-4-5") and is_claude("bedrock/anthropic.claude-3-haiku")
    assert not is_claude("openai/gpt-4o-mini") and not is_claude("gemini/gemini-2.5-pro")


def test_mock_response_round_trip_with_usage_and_cost(request_: ModelRequest) -> None:
    response = LiteLLMModel("openai/gpt-4o-mini", mock_response='{"verdict": "PASS"}').complete(request_)
    assert response.text == '{"verdict": "PASS"}'
    assert response.usage.calls == 1 and response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.cost_usd is not None and response.usage.cost_usd > 0


@pytest.mark.parametrize(
    ("mock", "kind"),
    [("litellm.RateLimitError", "rate_limit"), ("litellm.InternalServerError", "server")],
)
def test_mock_errors_map_to_model_error_kinds(mock: str, kind: str, request_: ModelRequest) -> None:
    with pytest.raises(ModelError) as raised:
        LiteLLMModel("openai/gpt-4o-mini", mock_response=mock).complete(request_)
    assert raised.value.kind == kind


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (lambda: litellm.Timeout("t", model="m", llm_provider="openai"), "timeout"),
        (lambda: litellm.RateLimitError("r", llm_provider="openai", model="m"), "rate_limit"),
        (lambda: litellm.APIConnectionError("c", llm_provider="openai", model="m"), "server"),
        (lambda: litellm.InternalServerError("i", llm_provider="openai", model="m"), "server"),
        (lambda: litellm.ServiceUnavailableError("s", llm_provider="openai", model="m"), "server"),
        (lambda: litellm.AuthenticationError("a", llm_provider="openai", model="m"), "auth"),
        (lambda: litellm.BadRequestError("b", model="m", llm_provider="openai"), "bad_request"),
        (lambda: litellm.ContextWindowExceededError("w", model="m", llm_provider="openai"), "bad_request"),
        (lambda: KeyError("x"), "other"),
    ],
)
def test_litellm_exceptions_map_to_kinds(exc: object, kind: str) -> None:
    assert map_litellm_error(exc()).kind == kind  # type: ignore[operator]


# ---------------------------------------------------------------- end to end through the verifier

HERE = Path(__file__).parent
POLICY = "Cancel only after the user explicitly confirms.\n"


@pytest.fixture
def context() -> CheckContext:
    checklist = parse_checklist(
        f"""
schema_version: 1
policy: {{name: t, version: "{policy_version(POLICY)}"}}
tools:
  cancel_reservation:
    requirements:
      - id: C-1
        text: The user explicitly confirmed the cancellation.
        kind: procedural
        source: Cancel only after the user explicitly confirms.
"""
    )
    return CheckContext(checklist=checklist, policy_text=POLICY, now=datetime(2024, 5, 15, tzinfo=timezone.utc))


CALL = ToolCall(id="c1", name="cancel_reservation", arguments={"reservation_id": "R1"})
DIALOGUE = Trajectory(
    messages=[
        Message(role="user", content="cancel R1"),
        Message(role="assistant", content="Cancel R1, refund to the card. Proceed?"),
        Message(role="user", content="yes"),
        Message(role="assistant", tool_calls=[CALL]),
    ]
)


def _verdict(status: str, verdict: str) -> str:
    items = [{"id": "C-1", "status": status, "evidence": "2: the user said yes", "evidence_messages": [2]}]
    return json.dumps({"requirements": items, "verdict": verdict, "remediation": "Ask the user to confirm first."})


def test_verifier_through_litellm_mock_response_blocks(context: CheckContext) -> None:
    model = LiteLLMModel("openai/gpt-4o-mini", mock_response=_verdict("NOT_MET", "BLOCK"))
    decision = LLMVerifier(model).verify(CALL, DIALOGUE, context)
    assert decision.outcome == "block" and decision.stage == "verifier"
    assert decision.message == "Ask the user to confirm first."
    assert decision.usage is not None and decision.usage.cost_usd is not None


def test_verifier_through_litellm_mock_response_passes_async(context: CheckContext) -> None:
    model = LiteLLMModel("anthropic/claude-sonnet-4-5", mock_response=_verdict("MET", "PASS"))
    decision = asyncio.run(LLMVerifier(model).averify(CALL, DIALOGUE, context))
    assert decision.outcome == "allow"


def test_verifier_through_litellm_rate_limits_fail_closed(context: CheckContext) -> None:
    model = LiteLLMModel("openai/gpt-4o-mini", mock_response="litellm.RateLimitError")
    decision = LLMVerifier(model, retries=1, backoff_s=0).verify(CALL, DIALOGUE, context)
    assert decision.stage == "verifier_error" and decision.outcome == "block"
    assert decision.usage is not None and decision.usage.calls == 2
