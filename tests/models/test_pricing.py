"""cost_usd reads LiteLLM's bundled price table; unknown models cost None, not 0."""

from __future__ import annotations

import os

import pytest

from policyguard.verifier.models.pricing import cost_usd


@pytest.fixture(scope="module")
def table() -> dict:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm.model_cost


def test_known_model_uses_the_table_rates(table: dict) -> None:
    rates = table["gpt-4o-mini"]
    expected = 1000 * rates["input_cost_per_token"] + 200 * rates["output_cost_per_token"]
    assert cost_usd("gpt-4o-mini", 1000, 0, 200) == pytest.approx(expected)


def test_provider_prefix_is_understood() -> None:
    assert cost_usd("openai/gpt-4o-mini", 1000, 0, 200) == cost_usd("gpt-4o-mini", 1000, 0, 200)


def test_cached_tokens_are_part_of_input_and_priced_at_the_cache_rate(table: dict) -> None:
    rates = table["gpt-4o-mini"]
    expected = 600 * rates["input_cost_per_token"] + 400 * rates["cache_read_input_token_cost"]
    assert cost_usd("gpt-4o-mini", 1000, 400, 0) == pytest.approx(expected)
    assert cost_usd("gpt-4o-mini", 1000, 400, 0) < cost_usd("gpt-4o-mini", 1000, 0, 0)  # type: ignore[operator]


def test_cache_writes_use_the_write_rate(table: dict) -> None:
    rates = table["claude-sonnet-4-5"]
    expected = 100 * rates["input_cost_per_token"] + 900 * rates["cache_creation_input_token_cost"]
    assert cost_usd("claude-sonnet-4-5", 1000, 0, 0, cache_write_tokens=900) == pytest.approx(expected)


def test_unknown_model_costs_none() -> None:
    assert cost_usd("acme/not-a-model", 1000, 0, 10) is None
