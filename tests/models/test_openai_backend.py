"""OpenAIModel: the exact request it sends, usage and cost it reads, errors it maps."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from policyguard import ModelError
from policyguard.verifier.models.base import ModelRequest
from policyguard.verifier.models.openai_backend import OpenAIModel, error_kind_for_status, map_openai_error
from policyguard.verifier.models.pricing import cost_usd

try:
    import httpx2 as httpx  # the HTTP client this openai SDK is built on
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]


def completion(text: str | None = '{"verdict": "PASS"}', cached: int = 300) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}},
            ],
            "usage": {
                "prompt_tokens": 1200,
                "completion_tokens": 80,
                "total_tokens": 1280,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


class FakeCompletions:
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
        self.chat = type("Chat", (), {})()
        self.chat.completions = FakeCompletions(result)


def test_request_payload_is_exact(request_: ModelRequest) -> None:
    client = FakeClient(completion())
    OpenAIModel("gpt-4o-mini", client=client).complete(request_)
    assert client.chat.completions.calls == [
        {
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "INSTRUCTIONS AND POLICY"},
                {"role": "system", "content": "CHECKLIST FOR TOOL"},
                {"role": "user", "content": "DIALOGUE AND PENDING CALL"},
            ],
            "max_completion_tokens": 777,
            "timeout": 9.0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verifier_output", "schema": request_.response_schema, "strict": True},
            },
        }
    ]


def test_extra_create_kwargs_are_passed(request_: ModelRequest) -> None:
    client = FakeClient(completion())
    OpenAIModel("gpt-4o-mini", client=client, temperature=0).complete(request_)
    assert client.chat.completions.calls[0]["temperature"] == 0


def test_text_usage_and_cost(request_: ModelRequest) -> None:
    response = OpenAIModel("gpt-4o-mini", client=FakeClient(completion())).complete(request_)
    assert response.text == '{"verdict": "PASS"}'
    assert response.model == "gpt-4o-mini-2024-07-18"
    usage = response.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens, usage.calls) == (1200, 300, 80, 1)
    assert usage.cost_usd == pytest.approx(cost_usd("gpt-4o-mini", 1200, 300, 80))
    assert usage.latency_s >= 0


def test_unknown_model_has_no_cost(request_: ModelRequest) -> None:
    response = OpenAIModel("my-finetune-xyz", client=FakeClient(completion())).complete(request_)
    assert response.usage.cost_usd is None


def test_missing_content_is_empty_text(request_: ModelRequest) -> None:
    assert OpenAIModel("gpt-4o-mini", client=FakeClient(completion(None))).complete(request_).text == ""


_REQ = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")


def _status(cls: type, code: int) -> Exception:
    return cls("boom", response=httpx.Response(code, request=_REQ), body=None)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (openai.APITimeoutError(request=_REQ), "timeout"),
        (openai.APIConnectionError(request=_REQ), "server"),
        (_status(openai.RateLimitError, 429), "rate_limit"),
        (_status(openai.InternalServerError, 500), "server"),
        (_status(openai.InternalServerError, 503), "server"),
        (_status(openai.AuthenticationError, 401), "auth"),
        (_status(openai.PermissionDeniedError, 403), "auth"),
        (_status(openai.BadRequestError, 400), "bad_request"),
        (_status(openai.NotFoundError, 404), "bad_request"),
        (RuntimeError("weird"), "other"),
    ],
)
def test_sdk_errors_map_to_model_error_kinds(exc: Exception, kind: str, request_: ModelRequest) -> None:
    with pytest.raises(ModelError) as raised:
        OpenAIModel("gpt-4o-mini", client=FakeClient(exc)).complete(request_)
    assert raised.value.kind == kind
    assert map_openai_error(exc).kind == kind


def test_status_kinds() -> None:
    assert [error_kind_for_status(s) for s in (408, 429, 401, 403, 400, 422, 500, 529, None)] == [
        "timeout",
        "rate_limit",
        "auth",
        "auth",
        "bad_request",
        "bad_request",
        "server",
        "server",
        "other",
    ]


class FakeAsyncCompletions(FakeCompletions):
    async def create(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().create(**kwargs)


def test_async_client_is_used_when_given(request_: ModelRequest) -> None:
    async_client = FakeClient(completion())
    async_client.chat.completions = FakeAsyncCompletions(completion())
    model = OpenAIModel("gpt-4o-mini", async_client=async_client)
    response = asyncio.run(model.acomplete(request_))
    assert response.usage.input_tokens == 1200
    assert async_client.chat.completions.calls[0]["model"] == "gpt-4o-mini"


def test_async_falls_back_to_the_sync_client(request_: ModelRequest) -> None:
    client = FakeClient(completion())
    response = asyncio.run(OpenAIModel("gpt-4o-mini", client=client).acomplete(request_))
    assert response.text and len(client.chat.completions.calls) == 1
