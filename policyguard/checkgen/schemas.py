"""What each pipeline step asks the model to return, and how a response is read.

Each step's answer is a pydantic model; its JSON schema goes to the model as
``response_schema`` and the same model validates the reply. Requirements reuse
:class:`policyguard.checklist.Requirement` and :class:`FactSource` so a parsed
answer is already in checklist shape. A reply is read by taking the *last*
top-level JSON object in the text (models like to think aloud first); anything
that is not one, or does not validate, is malformed.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..checklist import FactSource, PrincipalSource, Requirement


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
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found = value
        index = text.find("{", end)
    if found is None:
        raise MalformedResponse("no JSON object in the response")
    return found


def parse_response(text: str, schema: type[Out]) -> Out:
    """Validate the last JSON object of ``text`` against ``schema``."""
    data = last_json_object(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise MalformedResponse(f"the JSON does not fit the {schema.__name__} schema: {problems}") from exc


def response_schema(schema: type[BaseModel]) -> dict[str, Any]:
    return schema.model_json_schema()
