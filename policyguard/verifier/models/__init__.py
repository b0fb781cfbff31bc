"""Model backends behind one Protocol. No provider SDK is imported until used.

The exported names load on first use (PEP 562): ``resolve_model("none")``, the
gate-only guard of ``policyguard verify`` and ``policyguard hook``, builds none
of the request and response models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports
from policyguard.distribution import install_hint
from policyguard.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .base import Model, ModelRequest, ModelResponse, PromptPart
    from .scripted import ScriptedModel

__all__ = ["Model", "ModelRequest", "ModelResponse", "PromptPart", "ScriptedModel", "resolve_model"]

__getattr__ = lazy_exports(
    __name__,
    {
        "Model": ".base",
        "ModelRequest": ".base",
        "ModelResponse": ".base",
        "PromptPart": ".base",
        "ScriptedModel": ".scripted",
    },
)


def resolve_model(spec: str) -> Model | None:
    """Build a model from a spec string.

    * ``none`` - no model: only the deterministic layer runs;
    * ``scripted:FILE.json`` - a :class:`ScriptedModel` playing FILE's steps;
    * ``openai-sdk:MODEL`` / ``anthropic-sdk:MODEL`` - the direct SDK backends
      (extras ``openai`` / ``anthropic``);
    * ``litellm:MODEL`` or a bare ``MODEL`` (e.g. ``openai/gpt-4.1-mini``) - LiteLLM.

    A spec no backend can use is a :class:`ConfigError` raised here rather
    than a failed (BLOCK) call later: a name LiteLLM cannot route (a bare name
    must be one LiteLLM's price table lists; otherwise write
    ``PROVIDER/MODEL``), or a provider model whose API key is not in the
    environment (the message names the variable, ``OPENAI_API_KEY``...). Both
    are said before LiteLLM is imported when the name alone tells.
    """
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty model spec")
    if spec == "none":
        return None
    prefix, _, rest = spec.partition(":")
    if rest and prefix == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel.from_file(rest)
    if rest and prefix == "openai-sdk":
        _require("openai", "openai", spec)
        from .openai_backend import OpenAIModel

        openai_model = OpenAIModel(rest)
        openai_model.check_environment()
        return openai_model
    if rest and prefix == "anthropic-sdk":
        _require("anthropic", "anthropic", spec)
        from .anthropic_backend import AnthropicModel

        anthropic_model = AnthropicModel(rest)
        anthropic_model.check_environment()
        return anthropic_model
    _require("litellm", "litellm", spec)
    from .litellm_backend import LiteLLMModel

    model = LiteLLMModel(rest if rest and prefix == "litellm" else spec)
    model.check_environment()
    return model


def _require(module: str, extra: str, spec: str) -> None:
    """A ConfigError naming the extra to install when a backend's library is absent (checked without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"model {spec!r} needs the {module!r} package, which is not installed: "
            f"{install_hint(extra)}; the gate alone (--model none) needs no model library"
        )
