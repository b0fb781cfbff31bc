"""AnthropicModel: cached static prefix in `system`, schema, usage and cost, error mapping."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

from policyguard import ModelError
from policyguard.verifier.models.anthropic_backend import AnthropicModel, map_anthropic_error
from policyguard.verifier.models.base import ModelRequest, PromptPart
from policyguard.verifier.models.pricing import cost_usd

try:
    import httpx2 as httpx  # the HTTP client this anthropic SDK is built on
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]

EPHEMERAL = {"type": "ephemeral"}


def message(text: str = '{"verdict": "BLOCK"}') -> Message:
    return Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 150,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 500,
                "output_tokens": 90,
            },
        }
    )


class FakeMessages:
    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class FakeClient:
    def __init__(self, result: Any) -> None:
        self.messages = FakeMessages(result)


def test_request_payload_is_exact(request_: ModelRequest) -> None:
    client = FakeClient(message())
    AnthropicModel("claude-sonnet-4-5", client=client).complete(request_)
    assert client.messages.calls == [
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 777,
            "system": [
                {"type": "text", "text": "INSTRUCTIONS AND POLICY", "cache_control": EPHEMERAL},
                {"type": "text", "text": "CHECKLIST FOR TOOL", "cache_control": EPHEMERAL},
            ],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "DIALOGUE AND PENDING CALL"}]}],
            "timeout": 9.0,
            "output_config": {"format": {"type": "json_schema", "schema": request_.response_schema}},
        }
    ]


def test_at_most_four_breakpoints_on_the_last_cached_parts() -> None:
    parts = [PromptPart(role="system", content=f"S{i}", cache=True) for i in range(6)]
    parts.append(PromptPart(role="system", content="not cached"))
    parts.append(PromptPart(role="user", content="U"))
    payload = AnthropicModel("claude-sonnet-4-5", client=FakeClient(message())).payload(ModelRequest(parts=parts))
    marked = [block["text"] for block in payload["system"] if "cache_control" in block]
    assert marked == ["S2", "S3", "S4", "S5"]
    assert "output_config" not in payload  # no schema asked for


def test_without_structured_output_the_schema_is_asked_for_in_text(request_: ModelRequest) -> None:
    payload = AnthropicModel("claude-3-haiku", client=FakeClient(message()), structured_output=False).payload(request_)
    assert "output_config" not in payload
    user_blocks = payload["messages"][0]["content"]
    assert user_blocks[0]["text"] == "DIALOGUE AND PENDING CALL"
    assert "JSON schema" in user_blocks[-1]["text"] and '"verdict"' in user_blocks[-1]["text"]


def test_text_usage_and_cost(request_: ModelRequest) -> None:
    response = AnthropicModel("claude-sonnet-4-5", client=FakeClient(message())).complete(request_)
    assert response.text == '{"verdict": "BLOCK"}'
    usage = response.usage
    # Anthropic's input_tokens excludes cache reads and writes; ours counts every prompt token.
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2650, 2000, 90)
    assert usage.cost_usd == pytest.approx(cost_usd("claude-sonnet-4-5", 2650, 2000, 90, cache_write_tokens=500))


_REQ = httpx.Request("POST", "https://api.anthropic.com/v1/messages")


def _status(cls: type, code: int) -> Exception:
    return cls("boom", response=httpx.Response(code, request=_REQ), body=None)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (anthropic.APITimeoutError(request=_REQ), "timeout"),
        (anthropic.APIConnectionError(request=_REQ), "server"),
        (_status(anthropic.RateLimitError, 429), "rate_limit"),
        (_status(anthropic.InternalServerError, 500), "server"),
        (_status(anthropic.APIStatusError, 529), "server"),  # overloaded
        (_status(anthropic.AuthenticationError, 401), "auth"),
        (_status(anthropic.BadRequestError, 400), "bad_request"),
        (ValueError("odd"), "other"),
    ],
)
def test_sdk_errors_map_to_model_error_kinds(exc: Exception, kind: str, request_: ModelRequest) -> None:
    with pytest.raises(ModelError) as raised:
        AnthropicModel("claude-sonnet-4-5", client=FakeClient(exc)).complete(request_)
    assert raised.value.kind == kind
    assert map_anthropic_error(exc).kind == kind


def test_async_client(request_: ModelRequest) -> None:
    class AsyncMessages(FakeMessages):
        async def create(self, **kwargs: Any) -> Any:  # type: ignore[override]
            return super().create(**kwargs)

    async_client = FakeClient(message())
    async_client.messages = AsyncMessages(message())
    response = asyncio.run(AnthropicModel("claude-sonnet-4-5", async_client=async_client).acomplete(request_))
    assert response.usage.cached_tokens == 2000
    assert async_client.messages.calls[0]["system"][1]["cache_control"] == EPHEMERAL
