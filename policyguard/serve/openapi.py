"""The OpenAPI 3.1 document served at ``/openapi.json``, built from the same pydantic models the server uses."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from policyguard import __version__
from policyguard.decision import Decision
from policyguard.enforcement.executor import ExecutionResult

from .body import CheckRequest, ErrorBody, ExecuteRequest, NeededRead, ResultAnswer, ResultReport

_REF = "#/components/schemas/{model}"


def _json(schema: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(model=schema)}}}


def _errors(*codes: int) -> dict[str, Any]:
    why = {
        400: "The body is not strict JSON or breaks a limit.",
        401: "The bearer token is missing or wrong.",
        413: "The body is over the size limit.",
        415: "The body is not application/json.",
        422: "The body's shape, the dialogue or the call cannot be read; 'field' says where.",
        408: "The body did not arrive in time.",
        409: "The session's record is gone (evicted: retention or size limits) or full: nothing was recorded.",
        500: "Nothing was decided: do not run the call.",
        503: "No decision in time (--decision-timeout), or the store cannot be reached: do not run the call.",
    }
    return {str(code): {"description": why[code], "content": _json("ErrorBody")} for code in codes}


def openapi_document(*, grants: bool, execute: bool) -> dict[str, Any]:
    _, defs = models_json_schema(
        [
            (CheckRequest, "validation"),
            (ResultReport, "validation"),
            (ResultAnswer, "serialization"),
            (ExecuteRequest, "validation"),
            (ErrorBody, "validation"),
            (NeededRead, "serialization"),
            (Decision, "serialization"),
            (ExecutionResult, "serialization"),
        ],
        ref_template=_REF,
    )
    schemas = dict(defs.get("$defs", {}))
    decision = dict(schemas["Decision"])
    decision["properties"] = {
        **decision.get("properties", {}),
        "unverified": {"type": "array", "items": {"type": "string"}, "description": "Requirement ids nobody judged."},
        "needs_reads": {
            "type": "array",
            "items": {"$ref": _REF.format(model="NeededRead")},
            "description": "On a block that only reads can cure: the reads to make and send back (docs/guarding/"
            "http.md). Absent otherwise.",
        },
    }
    schemas["Decision"] = decision
    grant_note = " The allow carries a signed grant (verify it against /.well-known/jwks.json)." if grants else ""
    paths: dict[str, Any] = {
        "/v1/check": {
            "post": {
                "summary": "Decide one pending tool call",
                "description": "Run the call only when outcome is allow." + grant_note,
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": _json("CheckRequest")},
                "responses": {
                    "200": {
                        "description": "The Decision (same schema as `policyguard verify`).",
                        "content": _json("Decision"),
                    },
                    **_errors(400, 401, 408, 413, 415, 422, 500, 503),
                },
            }
        },
        "/v1/results": {
            "post": {
                "summary": "Report what became of a call checked in a session",
                "description": "The call ran (content, is_error) or its fate is unknown (unknown). The next check's "
                "history carries results too, and the session takes them from there; report here a fate the "
                "history will not show, or shows later.",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": _json("ResultReport")},
                "responses": {
                    "200": {"description": "Whether the session took it.", "content": _json("ResultAnswer")},
                    **_errors(400, 401, 408, 409, 413, 415, 422, 503),
                },
            }
        },
        "/.well-known/jwks.json": {
            "get": {
                "summary": "Grant verification keys (Ed25519 OKP JWKs with kid; the signing key first)",
                "responses": {"200": {"description": "A JWK Set."}},
            }
        },
        "/healthz": {"get": {"summary": "The process is up", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {
            "get": {
                "summary": "The store is reachable and the checklist is loaded",
                "responses": {
                    "200": {"description": "ready (with the token, or none set: also the replica and checklist)"},
                    "503": {"description": "not ready (with the token: store timeout or unreachable; why is logged)"},
                },
            }
        },
        "/metrics": {"get": {"summary": "Prometheus text format", "responses": {"200": {"description": "metrics"}}}},
    }
    if execute:
        paths["/v1/execute"] = {
            "post": {
                "summary": "Demo executor: run a call under its grant (exactly one effect per nonce and key)",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": _json("ExecuteRequest")},
                "responses": {
                    "200": {"description": "What happened.", "content": _json("ExecutionResult")},
                    **_errors(400, 401, 413, 415, 422, 500),
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "PolicyGuard", "version": __version__},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
