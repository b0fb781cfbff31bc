"""Dollar cost of a model call, from LiteLLM's offline price table.

Token convention used across PolicyGuard: ``input_tokens`` counts every prompt
token, including the ``cached_tokens`` read from the provider's prompt cache
and the ``cache_write_tokens`` written to it; cached reads and cache writes
are priced at their own rates when the table has them. LiteLLM is imported
lazily, with the bundled price table (never fetched from the network); when
it is not installed (extra ``litellm``), every cost is ``None``.
"""

from __future__ import annotations

import os
from typing import Any


def _price_entry(model: str) -> dict[str, Any] | None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:  # the price table ships with LiteLLM; without it the cost is unknown, not zero
        return None

    table: dict[str, Any] = litellm.model_cost
    candidates = [model]
    if "/" in model:
        candidates.append(model.split("/", 1)[1])
    for name in candidates:
        entry = table.get(name)
        if isinstance(entry, dict) and entry.get("input_cost_per_token") is not None:
            return entry
    return None


def cost_usd(
    model: str,
    input_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    *,
    cache_write_tokens: int = 0,
) -> float | None:
    """The call's cost in US dollars, or ``None`` when the model is not in the price table."""
    entry = _price_entry(model)
    if entry is None:
        return None
    input_rate = float(entry["input_cost_per_token"])
    output_rate = float(entry.get("output_cost_per_token") or 0.0)
    cached_rate = entry.get("cache_read_input_token_cost")
    write_rate = entry.get("cache_creation_input_token_cost")
    cached_rate = input_rate if cached_rate is None else float(cached_rate)
    write_rate = input_rate if write_rate is None else float(write_rate)
    uncached = max(input_tokens - cached_tokens - cache_write_tokens, 0)
    return (
        uncached * input_rate
        + cached_tokens * cached_rate
        + cache_write_tokens * write_rate
        + output_tokens * output_rate
    )
