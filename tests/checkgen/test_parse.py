"""Reading a model reply: the last JSON object wins, anything else is malformed."""

from __future__ import annotations

import pytest

from policyguard.checkgen.cache import request_key
from policyguard.checkgen.schemas import ClassifyOut, MalformedResponse, last_json_object, parse_response
from policyguard.models import ModelRequest, PromptPart


def test_the_last_top_level_json_object_is_taken_not_a_nested_one() -> None:
    text = 'Draft: {"tools": []}\nFinal answer:\n```json\n{"tools": [{"name": "a", "mutating": true}]}\n```'
    assert last_json_object(text) == {"tools": [{"name": "a", "mutating": True}]}


def test_braces_in_prose_do_not_confuse_the_reader() -> None:
    assert last_json_object('use {curly} words, then {"a": {"b": 1}} and a stray {') == {"a": {"b": 1}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no json at all", "no JSON object"),
        ("[1, 2, 3]", "no JSON object"),
        ('{"tools": [{"name": "a"}]}', "tools.0.mutating: Field required"),
        ('{"tools": [], "extra": 1}', "extra: Extra inputs are not permitted"),
    ],
)
def test_replies_that_do_not_fit_the_schema_are_malformed(text: str, message: str) -> None:
    with pytest.raises(MalformedResponse, match=message):
        parse_response(text, ClassifyOut)


def test_the_cache_key_covers_model_name_prompt_and_schema() -> None:
    base = ModelRequest(parts=[PromptPart(role="user", content="p")], response_schema={"type": "object"})
    key = request_key("m", base)
    assert key == request_key("m", base.model_copy())
    assert key != request_key("other", base)
    assert key != request_key("m", base.model_copy(update={"parts": [PromptPart(role="user", content="q")]}))
    assert key != request_key("m", base.model_copy(update={"response_schema": {"type": "array"}}))
