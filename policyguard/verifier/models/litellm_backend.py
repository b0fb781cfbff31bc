"""LiteLLM backend: one class for every provider LiteLLM speaks to.

LiteLLM is imported inside the methods (it is slow to import and sets up
logging), always with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so it reads its
bundled price table instead of fetching one. The one LiteLLM global set, when
this backend first imports it, is ``suppress_debug_info``: LiteLLM otherwise
prints "Give Feedback / Get Help" banners on stdout, where the CLI writes JSON.

* Names and keys: :meth:`LiteLLMModel.check_environment` (called by
  :func:`policyguard.resolve_model`) fails with a :class:`ConfigError` for a
  name LiteLLM cannot route or naming the missing key variable
  (``OPENAI_API_KEY``...) before any call, and before LiteLLM is imported when
  the name alone tells (:mod:`policyguard.verifier.models.litellm_names`). An
  authentication failure at call time is the ``auth`` kind, which the verifier
  never retries.

* Structured output: a ``json_schema`` ``response_format`` when
  ``litellm.supports_response_schema`` says the model has it; otherwise the
  schema is asked for in plain text.
* Caching: Claude models (``anthropic/...``, ``bedrock/...claude...``) get
  ``cache_control: {"type": "ephemeral"}`` on each cached part (at most four);
  other providers cache long prefixes by themselves.
* Extra keyword arguments go to ``litellm.completion`` unchanged, e.g.
  ``mock_response="..."`` for offline tests (no network call is made).
"""

from __future__ import annotations

import os
import time
from typing import Any

from policyguard.decision import Usage
from policyguard.errors import ConfigError, ModelError

from .anthropic_backend import EPHEMERAL, cache_marked
from .base import ModelRequest, ModelResponse
from .litellm_names import missing_key, name_problem
from .pricing import cost_usd
from .sdk import error_kind_for_status, json_instruction


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # its help banners go to stdout, where the CLI prints JSON
    return litellm


# Options that authenticate a call without the provider's environment variable, or make no real call.
_AUTH_OPTIONS = ("api_key", "azure_ad_token", "azure_ad_token_provider", "mock_response")
# Options that route a name LiteLLM would not route by itself.
_ROUTING_OPTIONS = ("custom_llm_provider", "api_base", "base_url")


def _key_message(model: str, variables: str) -> str:
    return (
        f"model {model!r} needs {variables} in the environment (not set); "
        "set it, or use --model none for the gate alone"
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_claude(model: str) -> bool:
    """True for Claude models, whichever route LiteLLM takes to them."""
    lowered = model.lower()
    return lowered.startswith("anthropic/") or "claude" in lowered


class LiteLLMModel:
    """A :class:`policyguard.verifier.models.Model` through ``litellm.completion``."""

    def __init__(self, model: str, **completion_kwargs: Any) -> None:
        self.name = model
        self.model = model
        self.completion_kwargs = completion_kwargs

    def check_environment(self) -> None:
        """Fail with a :class:`ConfigError` when no call could work: a name LiteLLM cannot route, or a missing key.

        What :mod:`~policyguard.verifier.models.litellm_names` can tell from the name
        (an unknown bare name, a common provider's key variable) is said before
        LiteLLM is imported; LiteLLM then judges the rest. Only ``*_API_KEY``
        variables are required: base URLs and cloud credentials (AWS, Vertex)
        have other sources LiteLLM resolves itself. Passing ``api_key=`` (or
        ``mock_response=``) to the constructor skips the check, and routing
        options (``custom_llm_provider=``, ``api_base=``) skip the name check.
        """
        if any(option in self.completion_kwargs for option in _AUTH_OPTIONS):
            return
        routed = any(option in self.completion_kwargs for option in _ROUTING_OPTIONS)
        problem = None if routed else name_problem(self.model)
        if problem is not None:
            raise ConfigError(problem)
        missing = missing_key(self.model)
        if missing is not None:
            raise ConfigError(_key_message(self.model, missing))
        litellm = _litellm()
        if not routed:
            try:
                litellm.get_llm_provider(model=self.model)
            except Exception as exc:
                raise ConfigError(f"model {self.model!r}: LiteLLM cannot route it: {_first_line(exc)}") from None
        try:
            info = litellm.validate_environment(model=self.model, api_base=self.completion_kwargs.get("api_base"))
        except Exception:  # a provider LiteLLM cannot judge: the call will say
            return
        if info.get("keys_in_environment", True):
            return
        missing_keys = [str(key) for key in info.get("missing_keys", [])]
        keys = [key for key in missing_keys if key.endswith("_API_KEY")]
        if keys:
            raise ConfigError(_key_message(self.model, " or ".join(keys)))

    def supports_schema(self) -> bool:
        """Whether LiteLLM knows the model to accept a JSON schema (False when unsure)."""
        try:
            return bool(_litellm().supports_response_schema(model=self.model))
        except Exception:
            return False

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``litellm.completion``."""
        claude = is_claude(self.model)
        marked = cache_marked(request.parts) if claude else set()
        messages: list[dict[str, Any]] = []
        for index, part in enumerate(request.parts):
            if index in marked:
                block = {"type": "text", "text": part.content, "cache_control": dict(EPHEMERAL)}
                messages.append({"role": part.role, "content": [block]})
            else:
                messages.append({"role": part.role, "content": part.content})
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": request.max_output_tokens,
            "timeout": request.timeout_s,
        }
        if request.response_schema is not None:
            if self.supports_schema():
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": request.schema_name, "schema": request.response_schema, "strict": True},
                }
            else:
                messages.append({"role": "user", "content": json_instruction(request.response_schema)})
        payload.update(self.completion_kwargs)
        return payload

    def complete(self, request: ModelRequest) -> ModelResponse:
        litellm = _litellm()
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            response = litellm.completion(**payload)
        except Exception as exc:
            raise map_litellm_error(exc) from exc
        return self._response(response, time.perf_counter() - started)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        litellm = _litellm()
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**payload)
        except Exception as exc:
            raise map_litellm_error(exc) from exc
        return self._response(response, time.perf_counter() - started)

    def _response(self, response: Any, latency_s: float) -> ModelResponse:
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise ModelError("other", f"unreadable response: {exc}") from exc
        return ModelResponse(text=text, model=self.model, usage=self._usage(response, latency_s))

    def _usage(self, response: Any, latency_s: float) -> Usage:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        return Usage(
            input_tokens=prompt,
            cached_tokens=cached,
            output_tokens=completion,
            cost_usd=cost_usd(self.model, prompt, cached, completion, cache_write_tokens=written),
            latency_s=latency_s,
            calls=1,
        )


def map_litellm_error(exc: Exception) -> ModelError:
    """Turn a LiteLLM exception (or anything else) into a :class:`ModelError`."""
    if isinstance(exc, ModelError):
        return exc
    litellm = _litellm()
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)) or _missing_credentials(exc):
        return ModelError("auth", str(exc))
    if isinstance(exc, litellm.Timeout):
        return ModelError("timeout", str(exc))
    if isinstance(exc, litellm.RateLimitError):
        return ModelError("rate_limit", str(exc))
    if isinstance(exc, litellm.APIConnectionError):
        return ModelError("server", f"connection error: {exc}")
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        return ModelError("server", str(exc))
    if isinstance(exc, (litellm.BadRequestError, litellm.NotFoundError, litellm.UnprocessableEntityError)):
        return ModelError("bad_request", str(exc))
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return ModelError(error_kind_for_status(status), str(exc))
    if isinstance(exc, TimeoutError):
        return ModelError("timeout", str(exc))
    return ModelError("other", f"{type(exc).__name__}: {exc}")


def _missing_credentials(exc: Exception) -> bool:
    """LiteLLM reports an OpenAI call without a key as a 500 "Missing credentials": it is an auth failure."""
    text = str(exc).lower()
    return "missing credentials" in text or ("api key" in text and "missing" in text)
