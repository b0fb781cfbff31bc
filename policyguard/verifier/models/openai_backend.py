"""OpenAI Chat Completions backend, using the ``openai`` SDK directly (extra ``openai``).

Structured output goes through ``response_format={"type": "json_schema", ...}``
with ``strict: true``. OpenAI caches long prompt prefixes automatically, so the
static parts only need to come first (the verifier puts them there). The
default client is built with ``max_retries=0``: retrying is the caller's job
(the verifier retries with its own budget and timeout). The SDK is imported
only when a default client is built or an error is mapped.
"""

from __future__ import annotations

from typing import Any

from policyguard.decision import Usage
from policyguard.errors import ModelError

from .base import ModelRequest, ModelResponse
from .pricing import cost_usd
from .sdk import SDKModel, error_kind_for_status, json_instruction, map_sdk_error

__all__ = ["OpenAIModel", "error_kind_for_status", "json_instruction", "map_openai_error"]


class OpenAIModel(SDKModel):
    """A :class:`policyguard.verifier.models.Model` on OpenAI Chat Completions."""

    key_vars = ("OPENAI_API_KEY",)

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

    def _create(self, client: Any) -> Any:
        return client.chat.completions.create

    def _new_client(self, asynchronous: bool) -> Any:
        import openai

        return openai.AsyncOpenAI(max_retries=0) if asynchronous else openai.OpenAI(max_retries=0)

    def _map_error(self, exc: Exception) -> ModelError:
        return map_openai_error(exc)

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

    return map_sdk_error(exc, openai)
