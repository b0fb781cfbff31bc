"""Anthropic Messages backend, using the ``anthropic`` SDK directly (extra ``anthropic``).

The static prompt parts go into ``system`` as text blocks, and the cached ones
carry ``cache_control: {"type": "ephemeral"}`` so Anthropic caches the prefix
up to them. Every cached part gets a breakpoint (at most four, Anthropic's
limit; the last four are kept): with the verifier's layout, the instructions
and policy are cached once for all tools and each tool's checklist on top.
Structured output uses ``output_config.format`` (json_schema); pass
``structured_output=False`` for models without it, and the schema is asked
for in plain text instead.
"""

from __future__ import annotations

from typing import Any

from policyguard.decision import Usage
from policyguard.errors import ModelError

from .base import ModelRequest, ModelResponse, PromptPart
from .pricing import cost_usd
from .sdk import SDKModel, json_instruction, map_sdk_error

MAX_CACHE_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}


def cache_marked(parts: list[PromptPart]) -> set[int]:
    """Indexes of the parts that get a cache breakpoint: the last four cached ones."""
    cached = [i for i, part in enumerate(parts) if part.cache]
    return set(cached[-MAX_CACHE_BREAKPOINTS:])


class AnthropicModel(SDKModel):
    """A :class:`policyguard.verifier.models.Model` on the Anthropic Messages API."""

    key_vars = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

    def __init__(
        self,
        model: str,
        client: Any = None,
        *,
        async_client: Any = None,
        structured_output: bool = True,
        **create_kwargs: Any,
    ) -> None:
        super().__init__(model, client, async_client=async_client, **create_kwargs)
        self.structured_output = structured_output

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``messages.create``."""
        marked = cache_marked(request.parts)
        system: list[dict[str, Any]] = []
        user: list[dict[str, Any]] = []
        for index, part in enumerate(request.parts):
            block: dict[str, Any] = {"type": "text", "text": part.content}
            if index in marked:
                block["cache_control"] = dict(EPHEMERAL)
            (system if part.role == "system" else user).append(block)
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_output_tokens,
            "messages": [{"role": "user", "content": user}],
            "timeout": request.timeout_s,
        }
        if system:
            payload["system"] = system
        if request.response_schema is not None:
            if self.structured_output:
                payload["output_config"] = {"format": {"type": "json_schema", "schema": request.response_schema}}
            else:
                user.append({"type": "text", "text": json_instruction(request.response_schema)})
        if not user:
            user.append({"type": "text", "text": "Answer now."})
        payload.update(self.create_kwargs)
        return payload

    def _create(self, client: Any) -> Any:
        return client.messages.create

    def _new_client(self, asynchronous: bool) -> Any:
        import anthropic

        return anthropic.AsyncAnthropic(max_retries=0) if asynchronous else anthropic.Anthropic(max_retries=0)

    def _map_error(self, exc: Exception) -> ModelError:
        return map_anthropic_error(exc)

    def _response(self, message: Any, latency_s: float) -> ModelResponse:
        try:
            text = "".join(block.text for block in message.content if getattr(block, "type", None) == "text")
        except (AttributeError, TypeError) as exc:
            raise ModelError("other", f"unreadable response: {exc}") from exc
        return ModelResponse(
            text=text, model=getattr(message, "model", None) or self.model, usage=self._usage(message, latency_s)
        )

    def _usage(self, message: Any, latency_s: float) -> Usage:
        usage = getattr(message, "usage", None)
        fresh = int(getattr(usage, "input_tokens", 0) or 0)
        read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        output = int(getattr(usage, "output_tokens", 0) or 0)
        total_input = fresh + read + written  # Anthropic's input_tokens excludes cache reads and writes
        return Usage(
            input_tokens=total_input,
            cached_tokens=read,
            output_tokens=output,
            cost_usd=cost_usd(self.model, total_input, read, output, cache_write_tokens=written),
            latency_s=latency_s,
            calls=1,
        )


def map_anthropic_error(exc: Exception) -> ModelError:
    """Turn an ``anthropic`` SDK exception (or anything else) into a :class:`ModelError`."""
    if isinstance(exc, ModelError):
        return exc
    import anthropic

    return map_sdk_error(exc, anthropic)
