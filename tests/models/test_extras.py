"""The model backends are extras: without their library a model spec is a one-line error naming the extra.

The gate alone (``--model none``) needs no model library; LiteLLM, the OpenAI SDK and the
Anthropic SDK install with ``policyguard-agents[litellm]``, ``[openai]`` and ``[anthropic]``.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from policyguard.errors import ConfigError
from policyguard.verifier.models import resolve_model
from policyguard.verifier.models.pricing import cost_usd


@pytest.mark.parametrize(
    ("spec", "module"),
    [
        ("openai/gpt-4.1-mini", "litellm"),
        ("litellm:anthropic/claude-sonnet-4-5", "litellm"),
        ("openai-sdk:gpt-4.1-mini", "openai"),
        ("anthropic-sdk:claude-sonnet-4-5", "anthropic"),
    ],
)
def test_a_model_whose_library_is_not_installed_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, spec: str, module: str
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(ConfigError, match=rf"pip install -c constraints.txt -e '\.\[{module}\]'"):
        resolve_model(spec)


def test_the_gate_alone_needs_no_model_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert resolve_model("none") is None


def test_without_litellm_a_cost_is_unknown_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)  # import litellm now raises ImportError
    assert cost_usd("openai/gpt-4.1-mini", 1000, 0, 100) is None
