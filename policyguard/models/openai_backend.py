"""OpenAI Chat Completions backend, using the ``openai`` SDK directly (extra ``openai``).

Structured output goes through ``response_format={"type": "json_schema", ...}``
with ``strict: true``. OpenAI caches long prompt prefixes automatically, so the
static parts only need to come first (the verifier puts them there). The
default client is built with ``max_retries=0``: retrying is the caller's job
(the verifier retries with its own budget and timeout). The SDK is imported
only when a default client is built or an error is mapped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from ..decision import Usage
from ..errors import ModelError, ModelErrorKind
from .base import ModelRequest, ModelResponse
from .pricing import cost_usd


def error_kind_for_status(status: int | None) -> ModelErrorKind:
    """The :class:`ModelError` kind for an HTTP status from a provider."""
    if status is None:
        return "other"
    if status == 408:
        return "timeout"
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status >= 500:
        return "server"
    if 400 <= status < 500:
        return "bad_request"
    return "other"


def json_instruction(schema: dict[str, Any]) -> str:
    """The plain-text fallback when a backend cannot enforce a schema."""
    import json

    return "Respond with one JSON object, and nothing else, matching this JSON schema:\n" + json.dumps(schema)


class OpenAIModel:
    """A :class:`policyguard.models.Model` on OpenAI Chat Completions.

    ``client`` / ``async_client`` may be injected (tests pass fakes); without an
    async client, :meth:`acomplete` runs the sync call in a worker thread.
    """

    def __init__(self, model: str, client: Any = None, *, async_client: Any = None, **create_kwargs: Any) -> None:
        self.name = model
        self.model = model
        self.create_kwargs = create_kwargs
        self._client = client
        self._async_client = async_client
        self._lock = threading.Lock()

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``chat.completions.create``."""
        messages = [{"role": part.role, "content": part.content} for part in request.parts]
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_completion_tokens": request.max_output_tokens,
            "timeout": request.timeout_s,
        }
        if request.response_schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": request.response_schema, "strict": True},
            }
        payload.update(self.create_kwargs)
        return payload

    def complete(self, request: ModelRequest) -> ModelResponse:
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            response = self._sync_client().chat.completions.create(**payload)
        except Exception as exc:
            raise map_openai_error(exc) from exc
        return self._response(response, time.perf_counter() - started)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        client = self._async()
        if client is None:
            return await asyncio.to_thread(self.complete, request)
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            response = await client.chat.completions.create(**payload)
        except Exception as exc:
            raise map_openai_error(exc) from exc
        return self._response(response, time.perf_counter() - started)

    def _sync_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(max_retries=0)
            return self._client

    def _async(self) -> Any:
        with self._lock:
            if self._async_client is None and self._client is None:
                import openai

                self._async_client = openai.AsyncOpenAI(max_retries=0)
            return self._async_client

    def _response(self, response: Any, latency_s: float) -> ModelResponse:
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise ModelError("other", f"unreadable response: {exc}") from exc
        return ModelResponse(
            text=text, model=getattr(response, "model", None) or self.model, usage=self._usage(response, latency_s)
        )

    def _usage(self, response: Any, latency_s: float) -> Usage:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        return Usage(
            input_tokens=prompt,
            cached_tokens=cached,
            output_tokens=completion,
            cost_usd=cost_usd(self.model, prompt, cached, completion),
            latency_s=latency_s,
            calls=1,
        )


def map_openai_error(exc: Exception) -> ModelError:
    """Turn an ``openai`` SDK exception (or anything else) into a :class:`ModelError`."""
    if isinstance(exc, ModelError):
        return exc
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ModelError("timeout", str(exc))
    if isinstance(exc, openai.APIConnectionError):
        return ModelError("server", f"connection error: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return ModelError(error_kind_for_status(exc.status_code), str(exc))
    if isinstance(exc, TimeoutError):
        return ModelError("timeout", str(exc))
    return ModelError("other", f"{type(exc).__name__}: {exc}")
