"""Reading a model reply: the last JSON object wins, anything else is malformed."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from policyguard.authoring.checkgen.cache import request_key
from policyguard.authoring.checkgen.schemas import (
    ClassifyOut,
    GeneralOut,
    MalformedResponse,
    RequirementsOut,
    ReviewOut,
    last_json_object,
    parse_response,
    response_schema,
)
from policyguard.verifier.models import ModelRequest, PromptPart


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


def test_a_wire_form_answer_parses_to_the_same_requirements_as_the_checklist_form() -> None:
    checklist_form: dict[str, Any] = {
        "requirements": [
            {
                "id": "r1",
                "text": "t",
                "kind": "data",
                "source": "s",
                "prerequisites": ["get_order"],
                "check": "args.amount <= facts.order.paid",
                "examples": [
                    {
                        "args": {"amount": 1},
                        "facts": {"order": {"paid": 2}},
                        "principal": None,
                        "complies": True,
                        "note": None,
                    }
                ],
            }
        ],
        "facts": {"order": {"tool": "get_order", "match": {"order_id": "args.order_id"}, "description": None}},
    }
    wire_form = copy.deepcopy(checklist_form)
    example = wire_form["requirements"][0]["examples"][0]
    example["args_json"] = json.dumps(example.pop("args"))
    example["facts_json"] = json.dumps(example.pop("facts"))
    wire_form["facts"] = [
        {
            "name": "order",
            "tool": "get_order",
            "match": [{"param": "order_id", "expression": "args.order_id"}],
            "description": None,
        }
    ]
    assert parse_response(json.dumps(wire_form), RequirementsOut) == parse_response(
        json.dumps(checklist_form), RequirementsOut
    )


def test_example_arguments_that_are_not_a_json_object_are_malformed() -> None:
    req = {
        "id": "r",
        "text": "t",
        "kind": "data",
        "source": "s",
        "prerequisites": [],
        "check": "true",
        "examples": [
            {"args_json": "{amount: 1}", "facts_json": "{}", "principal": None, "complies": True, "note": None}
        ],
    }
    with pytest.raises(MalformedResponse, match="args_json is not JSON"):
        parse_response(json.dumps({"requirements": [req], "facts": []}), RequirementsOut)


def _objects(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


@pytest.mark.parametrize("step", [ClassifyOut, RequirementsOut, GeneralOut, ReviewOut])
def test_every_response_schema_is_valid_for_strict_structured_output(step: type[BaseModel]) -> None:
    """OpenAI's strict mode (which the backends request) needs closed objects with every field required."""
    schema = response_schema(step)
    objects = list(_objects(schema))
    assert objects and objects[0] is schema
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    text = json.dumps(schema)
    for keyword in ('"default"', '"pattern"', '"minLength"', '"$ref"', '"title"'):
        assert keyword not in text
