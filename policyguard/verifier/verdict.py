"""The verifier's answer: a pydantic model and a parser that fails closed.

The model is asked for structured output matching :class:`VerifierOutput`. When
a backend returns text that is not clean JSON (prose around it, code fences,
several drafts), :func:`parse_verifier_output` binds to the *last* top-level
JSON object that carries a ``verdict`` key and validates that one: if the last
verdict is off-menu the parse fails, even when an earlier draft was valid. A
model that changed its mind into something unreadable never yields a PASS.

Each judgement cites the messages it rests on in ``evidence_messages`` (integer
indexes, at most :data:`MAX_CITATIONS`). The schema sent to the model requires
the field; an answer without it parses as citing nothing, which the verifier's
evidence check (:mod:`policyguard.verifier.evidence`) rejects for a MET.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from policyguard.errors import PolicyGuardError
from policyguard.trajectory.jsontext import top_level_objects

JudgedStatus = Literal["MET", "NOT_MET", "NOT_APPLICABLE"]
Verdict = Literal["PASS", "BLOCK"]

_MAX_TEXT = 200_000
MAX_CITATIONS = 1_000


class VerdictParseError(PolicyGuardError):
    """The verifier's text held no valid verdict. The verifier turns this into BLOCK."""


class RequirementJudgement(BaseModel):
    """One requirement as judged: status, evidence in words, and the indexes of the messages it rests on."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    status: JudgedStatus
    evidence: str
    evidence_messages: list[StrictInt] = Field(default_factory=list)

    @field_validator("evidence_messages")
    @classmethod
    def _bounded(cls, value: list[int]) -> list[int]:
        if len(value) > MAX_CITATIONS:
            raise ValueError(f"more than {MAX_CITATIONS} cited messages")
        return value


class VerifierOutput(BaseModel):
    """What the verifier model must return."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    requirements: list[RequirementJudgement]
    verdict: Verdict
    remediation: str


def verifier_output_schema() -> dict[str, Any]:
    """The JSON schema sent as ``response_schema`` (every field required, no extra keys).

    A fresh deep copy each time: backends may adapt it, and it is built only once.
    """
    return copy.deepcopy(_schema())


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    """The pydantic schema made strict-mode ready: every property required, no defaults."""
    schema = VerifierOutput.model_json_schema()
    for definition in [schema, *schema.get("$defs", {}).values()]:
        properties = definition.get("properties")
        if isinstance(properties, dict):
            for prop in properties.values():
                prop.pop("default", None)
            definition["required"] = list(properties)
    return schema


def parse_verifier_output(text: str) -> VerifierOutput:
    """Parse the model's text into a :class:`VerifierOutput` or raise :class:`VerdictParseError`.

    Clean JSON is taken as is (and must be an object). Otherwise every top-level JSON object in the text
    is found (code fences and prose are skipped over), and the last one with a
    ``verdict`` key must validate.
    """
    if not text or not text.strip():
        raise VerdictParseError("empty output")
    if len(text) > _MAX_TEXT:
        raise VerdictParseError(f"output too long ({len(text)} characters)")
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except ValueError:
        pass
    else:
        if not isinstance(whole, dict):
            raise VerdictParseError(f"expected a JSON object, got {type(whole).__name__}")
        return _validate(whole)
    candidates = [obj for obj in top_level_objects(stripped) if "verdict" in obj]
    if not candidates:
        raise VerdictParseError("no JSON object with a verdict in the output")
    return _validate(candidates[-1])


def _validate(obj: dict[str, Any]) -> VerifierOutput:
    try:
        return VerifierOutput.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise VerdictParseError(f"invalid verdict at {where}: {first['msg']}") from exc
