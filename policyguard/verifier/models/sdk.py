"""What the direct-SDK backends share: lazy clients, timing, error mapping.

A subclass says how to build the payload, which SDK method to call, how to
build a default client, how to map the SDK's errors and how to read a
response; this class does the rest, the same way for sync and async calls.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from policyguard.errors import ConfigError, ModelError, ModelErrorKind

from .base import ModelRequest, ModelResponse


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


def map_sdk_error(exc: Exception, sdk: Any) -> ModelError:
    """Map an exception from a Stainless-generated SDK (``openai``, ``anthropic``) to a :class:`ModelError`.

    Both SDKs expose the same exception classes (``APITimeoutError``,
    ``APIConnectionError``, ``APIStatusError``); ``sdk`` is the imported module.
    """
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, sdk.APITimeoutError):
        return ModelError("timeout", str(exc))
    if isinstance(exc, sdk.APIConnectionError):
        return ModelError("server", f"connection error: {exc}")
    if isinstance(exc, sdk.APIStatusError):
        return ModelError(error_kind_for_status(exc.status_code), str(exc))
    if isinstance(exc, TimeoutError):
        return ModelError("timeout", str(exc))
    if isinstance(exc, TypeError) and "authentication" in str(exc).lower():  # anthropic: no key, no token
        return ModelError("auth", str(exc))
    return ModelError("other", f"{type(exc).__name__}: {exc}")


class SDKModel:
    """Base of the OpenAI and Anthropic SDK backends.

    ``client`` / ``async_client`` may be injected (tests pass fakes); without an
    async client, :meth:`acomplete` runs the sync call in a worker thread. The
    default clients are built on first use with ``max_retries=0``: retrying is
    the caller's job (the verifier retries within its own budget). A default
    client needs one of ``key_vars`` in the environment: :meth:`check_environment`
    (called by :func:`policyguard.resolve_model`) says so up front, and a call
    without one fails as the ``auth`` kind, which is never retried.
    """

    key_vars: tuple[str, ...] = ()

    def __init__(self, model: str, client: Any = None, *, async_client: Any = None, **create_kwargs: Any) -> None:
        self.name = model
        self.model = model
        self.create_kwargs = create_kwargs
        self._client = client
        self._async_client = async_client
        self._lock = threading.Lock()

    # -- what a subclass provides -------------------------------------------

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _create(self, client: Any) -> Any:
        """The SDK's create method on ``client`` (e.g. ``client.messages.create``)."""
        raise NotImplementedError

    def _new_client(self, asynchronous: bool) -> Any:
        raise NotImplementedError

    def _map_error(self, exc: Exception) -> ModelError:
        raise NotImplementedError

    def _response(self, raw: Any, latency_s: float) -> ModelResponse:
        raise NotImplementedError

    # -- the shared part ----------------------------------------------------

    def missing_key(self) -> str | None:
        """The variable(s) a default client would need and the environment lacks, or None."""
        if self._client is not None or self._async_client is not None or not self.key_vars:
            return None
        if any(os.environ.get(name) for name in self.key_vars):
            return None
        return " or ".join(self.key_vars)

    def check_environment(self) -> None:
        """Fail with a :class:`ConfigError` naming the key variable when no client can authenticate."""
        missing = self.missing_key()
        if missing is not None:
            raise ConfigError(
                f"model {self.model!r} needs {missing} in the environment (not set); "
                "set it, or use --model none for the gate alone"
            )

    def complete(self, request: ModelRequest) -> ModelResponse:
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            raw = self._create(self._sync_client())(**payload)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._response(raw, time.perf_counter() - started)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        client = self._async()
        if client is None:
            return await asyncio.to_thread(self.complete, request)
        payload = self.payload(request)
        started = time.perf_counter()
        try:
            raw = await self._create(client)(**payload)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._response(raw, time.perf_counter() - started)

    def _sync_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._raise_without_key()
                self._client = self._new_client(asynchronous=False)
            return self._client

    def _async(self) -> Any:
        """The async client; None when only a sync client was injected (then a thread is used)."""
        with self._lock:
            if self._async_client is None and self._client is None:
                self._raise_without_key()
                self._async_client = self._new_client(asynchronous=True)
            return self._async_client

    def _raise_without_key(self) -> None:
        missing = self.missing_key()
        if missing is not None:
            raise ModelError("auth", f"{missing} is not set")
