"""Every backend satisfies the Model Protocol and is reachable from a spec string."""

from __future__ import annotations

import pytest

from policyguard import Model, resolve_model
from policyguard.verifier.models.anthropic_backend import AnthropicModel
from policyguard.verifier.models.litellm_backend import LiteLLMModel
from policyguard.verifier.models.openai_backend import OpenAIModel


def test_backends_are_models() -> None:
    for model in (LiteLLMModel("openai/gpt-4o-mini"), OpenAIModel("gpt-4o-mini"), AnthropicModel("claude-sonnet-4-5")):
        assert isinstance(model, Model)
        assert model.name


def test_resolve_model_builds_each_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):  # resolve_model checks keys up front
        monkeypatch.setenv(key, "test-key")
    assert isinstance(resolve_model("openai-sdk:gpt-4o-mini"), OpenAIModel)
    assert isinstance(resolve_model("anthropic-sdk:claude-sonnet-4-5"), AnthropicModel)
    litellm_model = resolve_model("litellm:openai/gpt-4o-mini")
    assert isinstance(litellm_model, LiteLLMModel) and litellm_model.model == "openai/gpt-4o-mini"
    bare = resolve_model("gemini/gemini-2.5-pro")
    assert isinstance(bare, LiteLLMModel) and bare.model == "gemini/gemini-2.5-pro"
