"""What a LiteLLM model name needs, read without importing LiteLLM (its import takes seconds).

Two mistakes are reported at once, before any model library is imported:

* a bare name that names no provider and is not in LiteLLM's bundled price
  table (``--model bogus``): LiteLLM could not route it, so every call would fail;
* a common provider without its API key variable (``openai/...`` without
  ``OPENAI_API_KEY``).

A bare name LiteLLM's table does not list may still be one LiteLLM routes by a
rule (a model newer than the table); written as ``PROVIDER/MODEL`` it is
accepted. Whatever this module cannot judge (another provider, a name with a
``:``, no price table found) is left to LiteLLM itself once imported
(:meth:`~policyguard.verifier.models.litellm_backend.LiteLLMModel.check_environment`).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path

PRICE_TABLE = "model_prices_and_context_window_backup.json"
"""The table LiteLLM reads with ``LITELLM_LOCAL_MODEL_COST_MAP=True``, shipped inside its package."""

PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "mistral": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
}
"""Providers whose only credential is one of these variables (checked against LiteLLM in the tests)."""


@functools.cache
def price_table() -> dict[str, str] | None:
    """Bare model name -> LiteLLM provider, from LiteLLM's bundled table; None when it cannot be found."""
    try:
        spec = importlib.util.find_spec("litellm")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        raw = json.loads((Path(next(iter(spec.submodule_search_locations))) / PRICE_TABLE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    return {
        name: str(entry.get("litellm_provider", ""))
        for name, entry in raw.items()
        if isinstance(entry, dict) and "/" not in name and name != "sample_spec"
    }


def provider_of(model: str) -> str | None:
    """The provider ``model`` names (``openai/...``) or the table lists it under; None when unknown here."""
    prefix, slash, _ = model.partition("/")
    if slash:
        return prefix
    table = price_table()
    return None if table is None else table.get(model) or None


def name_problem(model: str) -> str | None:
    """Why LiteLLM could not route ``model``, when that is certain without importing it; else None."""
    if "/" in model or ":" in model:  # a provider prefix, a fine-tune or a versioned id: LiteLLM judges
        return None
    table = price_table()
    if table is None or model in table:
        return None
    return (
        f"model {model!r}: no provider and not a model LiteLLM knows; write PROVIDER/MODEL "
        "(e.g. openai/gpt-4.1-mini), openai-sdk:MODEL, anthropic-sdk:MODEL, scripted:FILE.json or none"
    )


def missing_key(model: str) -> str | None:
    """The key variable(s) ``model``'s provider needs and the environment lacks, when the provider is a common one."""
    provider = provider_of(model)
    names = PROVIDER_KEYS.get(provider or "")
    if names is None or any(os.environ.get(name) for name in names):
        return None
    return " or ".join(names)
