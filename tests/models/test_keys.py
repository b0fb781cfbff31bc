"""A provider model without its API key fails before any call, naming the variable; never retried.

The newcomer's path: ``--model openai/gpt-4.1-mini`` with no ``OPENAI_API_KEY``
must be a one-line configuration error (exit 2), not three retried "server"
errors, LiteLLM banners on stdout and a BLOCK that looks like a policy verdict.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timezone
from typing import Any

import pytest

from policyguard import ConfigError, Message, ModelError, ToolCall, Trajectory, parse_checklist, resolve_model
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.llm import RETRYABLE
from policyguard.verifier.models.anthropic_backend import AnthropicModel, map_anthropic_error
from policyguard.verifier.models.base import ModelRequest, PromptPart
from policyguard.verifier.models.litellm_backend import LiteLLMModel, map_litellm_error
from policyguard.verifier.models.litellm_names import PROVIDER_KEYS, missing_key
from policyguard.verifier.models.openai_backend import OpenAIModel

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY")
POLICY = "Cancel only after the user explicitly confirms.\n"
CALL = ToolCall(id="c1", name="cancel_reservation", arguments={"reservation_id": "R1"})
DIALOGUE = Trajectory(
    messages=[Message(role="user", content="cancel R1, yes"), Message(role="assistant", tool_calls=[CALL])]
)
REQUEST = ModelRequest(parts=[PromptPart(role="user", content="hi")])


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("openai/gpt-4.1-mini", "OPENAI_API_KEY"),
        ("litellm:gpt-4.1-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("gemini/gemini-2.5-pro", "GEMINI_API_KEY"),
        ("openai-sdk:gpt-4.1-mini", "OPENAI_API_KEY"),
        ("anthropic-sdk:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    ],
)
def test_a_model_without_its_key_is_a_config_error_naming_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        resolve_model(spec)


def test_a_model_with_its_key_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert isinstance(resolve_model("openai/gpt-4.1-mini"), LiteLLMModel)
    assert isinstance(resolve_model("openai-sdk:gpt-4.1-mini"), OpenAIModel)
    assert isinstance(resolve_model("anthropic-sdk:claude-sonnet-4-5"), AnthropicModel)


def test_an_explicit_key_or_a_mock_response_skips_the_environment_check() -> None:
    LiteLLMModel("openai/gpt-4.1-mini", api_key="sk-test").check_environment()
    LiteLLMModel("openai/gpt-4.1-mini", mock_response="{}").check_environment()


def test_providers_with_other_credential_sources_are_not_refused() -> None:
    """Ollama's base URL and AWS credentials have defaults LiteLLM resolves itself."""
    LiteLLMModel("ollama/llama3").check_environment()
    LiteLLMModel("bedrock/anthropic.claude-3-5-sonnet").check_environment()


def test_litellm_without_a_key_at_call_time_is_auth_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """LiteLLM reports a missing OpenAI key as a 500; it is an auth failure, and its banners stay off stdout."""
    with pytest.raises(ModelError) as caught:
        LiteLLMModel("openai/gpt-4.1-mini").complete(REQUEST)
    assert caught.value.kind == "auth"
    assert "auth" not in RETRYABLE
    assert capsys.readouterr().out == ""


def test_the_verifier_never_retries_an_auth_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from policyguard.verifier.llm import LLMVerifier

    calls: list[Any] = []

    def refuse(**kwargs: Any) -> Any:
        calls.append(kwargs)
        raise litellm.AuthenticationError("bad key", llm_provider="openai", model="gpt-4.1-mini")

    monkeypatch.setattr(litellm, "completion", refuse)
    checklist = parse_checklist(
        f"""
policy: {{name: t, version: "{policy_version(POLICY)}"}}
tools:
  cancel_reservation:
    requirements:
      - {{id: C-1, text: The user confirmed., kind: procedural, source: Cancel only after the user explicitly confirms.}}
"""
    )
    checklist_context = CheckContext(
        checklist=checklist, policy_text=POLICY, now=datetime(2024, 5, 15, tzinfo=timezone.utc)
    )
    decision = LLMVerifier(LiteLLMModel("openai/gpt-4.1-mini"), retries=3, backoff_s=0).verify(
        CALL, DIALOGUE, checklist_context
    )
    assert decision.outcome == "block" and decision.stage == "verifier_error"
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (lambda: litellm.InternalServerError("OpenAIException - Missing credentials.", "openai", "m"), "auth"),
    ],
)
def test_litellm_credential_failures_are_auth(exc: Any, kind: str) -> None:
    assert map_litellm_error(exc()).kind == kind


def test_the_sdk_backends_without_a_key_fail_as_auth_at_call_time() -> None:
    """Built directly (not through resolve_model), a keyless SDK model still never reaches the SDK's TypeError."""
    for model in (OpenAIModel("gpt-4.1-mini"), AnthropicModel("claude-sonnet-4-5")):
        with pytest.raises(ModelError, match="API_KEY") as caught:
            model.complete(REQUEST)
        assert caught.value.kind == "auth"
        with pytest.raises(ModelError, match="API_KEY"):
            asyncio.run(model.acomplete(REQUEST))


def test_the_anthropic_sdk_type_error_for_a_missing_key_is_auth() -> None:
    error = TypeError('"Could not resolve authentication method. Expected either api_key or auth_token to be set."')
    assert map_anthropic_error(error).kind == "auth"


def test_an_injected_client_needs_no_key_in_the_environment() -> None:
    OpenAIModel("gpt-4.1-mini", client=object()).check_environment()
    AnthropicModel("claude-sonnet-4-5", client=object()).check_environment()


# ---------------------------------------------------------------- said at once, before LiteLLM is imported


def _litellm_loaded_after_resolving(spec: str) -> tuple[str, bool]:
    """The ConfigError ``resolve_model(spec)`` raises in a fresh interpreter, and whether LiteLLM got imported."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom policyguard import ConfigError, resolve_model\n"
        f"try:\n    resolve_model({spec!r})\nexcept ConfigError as exc:\n    print(exc)\n"
        "print('litellm' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    *message, loaded = out.stdout.strip().splitlines()
    return " ".join(message), loaded == "True"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("openai/gpt-4.1-mini", "needs OPENAI_API_KEY"),
        ("gpt-4.1-mini", "needs OPENAI_API_KEY"),
        ("anthropic/claude-sonnet-4-5", "needs ANTHROPIC_API_KEY"),
        ("bogus", "model 'bogus': no provider and not a model LiteLLM knows"),
    ],
)
def test_a_missing_key_or_an_unknown_name_is_said_before_litellm_is_imported(spec: str, said: str) -> None:
    """Once: the key was reported only after LiteLLM's import (8 s); ``bogus`` ran the verifier and blocked."""
    message, loaded = _litellm_loaded_after_resolving(spec)
    assert said in message
    assert not loaded


@pytest.mark.parametrize("spec", ["bogus", "litellm:bogus", "gpt-4.1-mnii", "bogus/some-model"])
def test_a_name_litellm_cannot_route_is_a_config_error(spec: str) -> None:
    with pytest.raises(ConfigError, match="bogus|mnii"):
        resolve_model(spec)


def test_a_bare_name_litellm_knows_and_a_prefixed_new_name_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert isinstance(resolve_model("gpt-4.1-mini"), LiteLLMModel)
    assert isinstance(resolve_model("openai/a-model-newer-than-the-price-table"), LiteLLMModel)


def test_routing_options_let_a_name_litellm_does_not_know_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    LiteLLMModel("my-local-model", custom_llm_provider="openai").check_environment()


@pytest.mark.parametrize("provider", sorted(PROVIDER_KEYS))
def test_the_early_key_table_agrees_with_litellm(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each variable the table names is enough for LiteLLM, and without all of them LiteLLM misses the first."""
    variables = PROVIDER_KEYS[provider]
    for name in variables:
        monkeypatch.delenv(name, raising=False)
    model = f"{provider}/some-model"
    info = litellm.validate_environment(model=model)
    assert not info["keys_in_environment"] and variables[0] in info["missing_keys"]
    assert missing_key(model) == " or ".join(variables)
    for name in variables:
        monkeypatch.setenv(name, "k")
        assert litellm.validate_environment(model=model)["keys_in_environment"], name
        assert missing_key(model) is None
        monkeypatch.delenv(name)
