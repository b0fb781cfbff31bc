"""What each pipeline step asks the model to return, and how a response is read.

Each step's answer is a pydantic model in checklist shape (requirements reuse
:class:`policyguard.checklist.schema.Requirement` and :class:`FactSource`), which
validates the reply. The ``response_schema`` sent to the model is a *wire*
form of the same content that OpenAI's strict structured output accepts
(the backends send ``strict: true``): every object closed and every field
required (nullable where optional), no free-form maps - so maps become lists
(``facts: [{name, tool, match: [{param, expression}]}]``, review ``tools:
[{tool, requirements}]``) and an example's ``args``/``facts`` travel as JSON
text (``args_json``). :func:`parse_response` accepts both forms.

A reply is read by taking the *last* top-level JSON object in the text (models
like to think aloud first); anything that is not one, or does not validate, is
malformed.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policyguard.checklist.schema import FactSource, PrincipalSource, Requirement
from policyguard.trajectory.jsontext import top_level_objects


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolClass(_Out):
    name: str
    mutating: bool = Field(description="True if calling the tool can change any state (a write, a send, a transfer).")
    reason: str = ""


class ClassifyOut(_Out):
    """Step 1: a mutating/read-only verdict for each tool that declared nothing."""

    tools: list[ToolClass]


class RequirementsOut(_Out):
    """Step 2: one mutating tool's requirements and the facts their checks read."""

    requirements: list[Requirement]
    facts: dict[str, FactSource] = Field(default_factory=dict)


class GeneralOut(_Out):
    """Step 3: rules for every mutating call, plus the policy's fixed clock if it states one."""

    general_rules: list[Requirement]
    facts: dict[str, FactSource] = Field(default_factory=dict)
    clock: str | None = Field(
        default=None, description="The policy's stated current time as ISO-8601 with offset, or null."
    )
    principal: PrincipalSource | None = Field(
        default=None, description="The read-only lookup whose result names the authenticated user, or null."
    )


class Finding(_Out):
    tool: str | None = None
    requirement_id: str | None = None
    note: str


class ReviewOut(_Out):
    """Step 4: what the reviewer found and the whole revised requirement set."""

    omissions: list[Finding] = Field(default_factory=list)
    over_specifications: list[Finding] = Field(default_factory=list)
    tools: dict[str, list[Requirement]] = Field(description="Every mutating tool -> its revised requirements.")
    general_rules: list[Requirement]
    facts: dict[str, FactSource] = Field(default_factory=dict)


Out = TypeVar("Out", bound=BaseModel)


class MalformedResponse(ValueError):
    """A model reply holds no JSON object, or the last one does not fit the step's schema."""


def last_json_object(text: str) -> dict[str, Any]:
    """The last top-level JSON object in ``text`` (outside fences or prose)."""
    found = top_level_objects(text)
    if not found:
        raise MalformedResponse("no JSON object in the response")
    return found[-1]


def parse_response(text: str, schema: type[Out]) -> Out:
    """Validate the last JSON object of ``text`` (wire or checklist form) against ``schema``."""
    data = from_wire(last_json_object(text))
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise MalformedResponse(f"the JSON does not fit the {schema.__name__} schema: {problems}") from exc


# ---------------------------------------------------------------- the wire form


def _closed(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_STR: dict[str, Any] = {"type": "string"}
_STR_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}
_BOOL: dict[str, Any] = {"type": "boolean"}

_EXAMPLE = _closed(
    {
        "args_json": {"type": "string", "description": 'The call\'s arguments as a JSON object, e.g. {"amount": 10}.'},
        "facts_json": {"type": "string", "description": 'The facts as a JSON object, e.g. {"order": {"paid": 80}}.'},
        "principal": _STR_OR_NULL,
        "complies": _BOOL,
        "note": _STR_OR_NULL,
    }
)
_REQUIREMENT = _closed(
    {
        "id": _STR,
        "text": _STR,
        "kind": {"type": "string", "enum": ["data", "procedural"]},
        "confirmation": {
            "type": "boolean",
            "description": "True only for a procedural requirement that is the user's own yes to the action.",
        },
        "source": {"type": "string", "description": "The policy sentence, quoted verbatim."},
        "prerequisites": _array(_STR),
        "check": _STR_OR_NULL,
        "examples": _array(_EXAMPLE),
    }
)
_FACT = _closed(
    {
        "name": _STR,
        "tool": _STR,
        "match": _array(_closed({"param": _STR, "expression": _STR})),
        "description": _STR_OR_NULL,
    }
)
_FINDING = _closed({"tool": _STR_OR_NULL, "requirement_id": _STR_OR_NULL, "note": _STR})

WIRE_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {
    ClassifyOut: _closed({"tools": _array(_closed({"name": _STR, "mutating": _BOOL, "reason": _STR}))}),
    RequirementsOut: _closed({"requirements": _array(_REQUIREMENT), "facts": _array(_FACT)}),
    GeneralOut: _closed(
        {
            "general_rules": _array(_REQUIREMENT),
            "facts": _array(_FACT),
            "clock": _STR_OR_NULL,
            "principal": {"anyOf": [_closed({"tool": _STR, "field": _STR}), {"type": "null"}]},
        }
    ),
    ReviewOut: _closed(
        {
            "omissions": _array(_FINDING),
            "over_specifications": _array(_FINDING),
            "tools": _array(_closed({"tool": _STR, "requirements": _array(_REQUIREMENT)})),
            "general_rules": _array(_REQUIREMENT),
            "facts": _array(_FACT),
        }
    ),
}


def response_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The strict wire-form JSON schema the model is asked to answer in."""
    return WIRE_SCHEMAS[schema]


def from_wire(data: dict[str, Any]) -> dict[str, Any]:
    """Turn a wire-form answer into checklist form; checklist-form parts pass through unchanged."""
    data = dict(data)
    if isinstance(data.get("facts"), list):
        data["facts"] = _facts_from_wire(data["facts"])
    for key in ("requirements", "general_rules"):
        if isinstance(data.get(key), list):
            data[key] = [_requirement_from_wire(r) for r in data[key]]
    tools = data.get("tools")
    if isinstance(tools, list) and all(isinstance(t, dict) and "requirements" in t for t in tools):
        merged: dict[str, Any] = {}
        for item in tools:
            if item.get("tool") in merged:
                raise MalformedResponse(f"tool {item.get('tool')!r} appears twice in 'tools'")
            merged[str(item.get("tool"))] = item["requirements"]
        tools = merged
    if isinstance(tools, dict):
        data["tools"] = {
            k: [_requirement_from_wire(r) for r in v] if isinstance(v, list) else v for k, v in tools.items()
        }
    return data


def _facts_from_wire(facts: list[Any]) -> Any:
    result: dict[str, Any] = {}
    for fact in facts:
        if not isinstance(fact, dict) or not isinstance(fact.get("name"), str):
            return facts  # not the wire form: let validation say what is wrong
        body = {k: v for k, v in fact.items() if k != "name"}
        if isinstance(body.get("match"), list):
            body["match"] = {m.get("param"): m.get("expression") for m in body["match"] if isinstance(m, dict)}
        if fact["name"] in result:
            raise MalformedResponse(f"fact {fact['name']!r} is declared twice")
        result[fact["name"]] = body
    return result


def _requirement_from_wire(req: Any) -> Any:
    if not isinstance(req, dict) or not isinstance(req.get("examples"), list):
        return req
    return {**req, "examples": [_example_from_wire(e) for e in req["examples"]]}


def _example_from_wire(example: Any) -> Any:
    if not isinstance(example, dict):
        return example
    example = dict(example)
    for key in ("args", "facts"):
        encoded = example.pop(f"{key}_json", None)
        if encoded is None:
            continue
        try:
            value = json.loads(encoded) if isinstance(encoded, str) else encoded
        except ValueError as exc:
            raise MalformedResponse(f"an example's {key}_json is not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise MalformedResponse(f"an example's {key}_json is not a JSON object")
        example[key] = value
    return example
