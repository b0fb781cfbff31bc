"""Reading a request body: bounded, strict JSON, then a pydantic model; every refusal names the field.

The body is refused (never half-read) when it is over the size limit, not
UTF-8, not strict JSON (``NaN``, ``Infinity``, a key given twice: two parsers
in front of and behind a proxy could read different values), nested too deep,
or carries an integer beyond 64 bits. The shape is then checked by the models
below (``extra="forbid"``, strict types).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policyguard.session.store import MAX_SESSION_ID
from policyguard.trajectory import strictjson
from policyguard.trajectory.formats import Format  # every format the readers know, so a new reader is served too
from policyguard.trajectory.limits import value_problem

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_BODY_DEPTH = 96  # a message list, its content blocks, then a call's arguments (themselves limited to 64)
MAX_PRINCIPAL_CHARS = 256


class BadRequest(Exception):
    """A request the server refuses; ``status`` is the HTTP status, ``field`` where the problem is."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


class CheckRequest(BaseModel):
    """``POST /v1/check``: the dialogue so far and the pending call, in any supported message format."""

    model_config = ConfigDict(extra="forbid", strict=True)

    trajectory: list[Any] | dict[str, Any] = Field(
        description="The dialogue: a message list (OpenAI Chat, OpenAI Responses items, Anthropic messages) "
        "or a request body ({'messages': [...]} or {'input': [...]})."
    )
    call: dict[str, Any] = Field(description="The pending tool call, in our shape or a provider's.")
    principal: str | None = Field(
        default=None,
        max_length=MAX_PRINCIPAL_CHARS,
        description="The authenticated user the agent acts for, as the integrator knows it (never what the user "
        "typed); checks read it and the grant binds it. Recorded in the trace.",
    )
    system: str | None = Field(default=None, description="A separate system prompt (Anthropic style).")
    format: Format = Field(default="auto", description="The message format of 'trajectory'; detected by default.")
    session_id: str | None = Field(
        default=None,
        max_length=MAX_SESSION_ID,
        description="The conversation this call belongs to, as the client names it (printable, at most "
        f"{MAX_SESSION_ID} characters). With it the guard keeps the conversation's record in the server's store, "
        "shared by every replica: a write is judged on that record merged with 'trajectory' (a write the history "
        "no longer shows still counts), and a deny is keyed by the session and the call id. Without it "
        "(the default) the check is one-shot: 'trajectory' is all the guard knows, and a deny is keyed by the "
        "call id alone, so one conversation's blocked call_5 refuses every other conversation's call_5. "
        "Clients should send a session id.",
    )

    @field_validator("principal")
    @classmethod
    def _plain_principal(cls, value: str | None) -> str | None:
        return _identifier(value, "principal")

    @field_validator("session_id")
    @classmethod
    def _plain_session(cls, value: str | None) -> str | None:
        return _identifier(value, "session id")


class ResultReport(BaseModel):
    """``POST /v1/results``: what became of a call ``/v1/check`` judged in a session.

    The next check's history also carries results, and the session ingests
    them; report here when the fate is known before (or never reaches) the
    history: a result the host will not show, or a call whose fate is unknown.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    session_id: str = Field(max_length=MAX_SESSION_ID, description="The session_id the call was checked with.")
    call_id: str = Field(max_length=MAX_SESSION_ID, description="The call's id (its newest unanswered call).")
    content: str | None = Field(default=None, description="The call ran: the tool's result as the agent saw it.")
    is_error: bool = Field(default=False, description="With content: the tool failed or refused.")
    unknown: str | None = Field(
        default=None,
        max_length=1000,
        description="Instead of content: the call may or may not have run, and why (cancelled, timed out). "
        "It then counts as done for rules that limit repetition, and is no fact until read again.",
    )

    @field_validator("session_id", "call_id")
    @classmethod
    def _plain(cls, value: str) -> str:
        _identifier(value, "id")
        return value

    @model_validator(mode="after")
    def _one_fate(self) -> ResultReport:
        if (self.content is None) == (self.unknown is None):
            raise ValueError("give exactly one of 'content' (the call ran) and 'unknown' (its fate is unknown)")
        if self.unknown is not None and self.is_error:
            raise ValueError("'is_error' goes with 'content': an unknown fate is not an error result")
        return self


class ResultAnswer(BaseModel):
    """The answer to ``POST /v1/results``."""

    model_config = ConfigDict(extra="forbid")

    recorded: bool = Field(
        description="False when the session has no call of that id waiting for a result (already answered, "
        "or never checked in this session): nothing was changed."
    )


class NeededRead(BaseModel):
    """One read a ``block``'s ``needs_reads`` asks the client to make.

    Make it with the host's own read tool, then send the check again with the
    call (``call_id`` as given) and its result in the trajectory, just before the
    assistant message holding the pending call. The id's prefix marks the read as
    made for the guard: it never authenticates anyone.
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(description="The id to give the read's call and result in the re-sent trajectory.")
    tool: str = Field(description="A read tool the checklist declares mutating: false.")
    arguments: dict[str, Any] = Field(description="The read's arguments.")


def needed_reads(reads: list[Any], request_id: str) -> list[dict[str, Any]]:
    """``needs_reads`` for a block: each read the guard wants, with a call id of its own (guard-read prefix)."""
    from policyguard.gate.facts import FETCH_ID_PREFIX

    return [
        NeededRead(call_id=f"{FETCH_ID_PREFIX}{request_id[:12]}-{n}", tool=r.tool, arguments=r.arguments).model_dump()
        for n, r in enumerate(reads, 1)
    ]


class ExecuteRequest(BaseModel):
    """``POST /v1/execute`` (demo executor only): run a call under the grant ``/v1/check`` returned."""

    model_config = ConfigDict(extra="forbid", strict=True)

    call: dict[str, Any]
    grant: str | None = Field(default=None, max_length=16_384)
    principal: str | None = Field(default=None, max_length=MAX_PRINCIPAL_CHARS)
    resource: str | None = Field(default=None, max_length=MAX_PRINCIPAL_CHARS)

    @field_validator("principal", "resource")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return _identifier(value, "value")


def _identifier(value: str | None, what: str) -> str | None:
    """An id as systems write them: not empty, printable, no surrounding spaces (``""`` is not "nobody")."""
    if value is None:
        return None
    if not value or value.strip() != value or not value.isprintable():
        raise ValueError(f"the {what} must be a non-empty printable string without surrounding spaces")
    return value


class ErrorBody(BaseModel):
    """Every non-200 answer: one line naming the problem, and the field when there is one."""

    model_config = ConfigDict(extra="forbid")

    error: str
    field: str | None = None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> Any:
    """Strict JSON within the limits; :class:`BadRequest` (400) naming the problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(400, f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = strictjson.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest(400, f"the body is nested deeper than {MAX_BODY_DEPTH} levels") from None
    except ValueError as exc:  # bad JSON, a duplicate key, NaN, an integer too long to convert
        raise BadRequest(400, f"the body is not strict JSON: {' '.join(str(exc).split())}") from None
    if isinstance(value, float) and not math.isfinite(value):  # pragma: no cover - parse_constant refuses these
        raise BadRequest(400, "the body is not a finite number")
    problem = value_problem(value, max_depth=MAX_BODY_DEPTH, max_nodes=None)
    if problem is None and _MAY_ESCAPE_SURROGATE.search(text) is not None:
        problem = surrogate_problem(value)
    if problem is not None:
        raise BadRequest(400, f"the body breaks a limit: {problem}")
    return value


# UTF-8 text decodes to no surrogate; JSON gives one only through an escape \uD800-\uDFFF. A body without such an
# escape (or with a backslash before "u" that is not one: that only costs the walk) holds none.
_MAY_ESCAPE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def surrogate_problem(value: Any) -> str | None:
    """A lone UTF-16 surrogate (``"\\ud800"``) is valid JSON but no text: it could not even be echoed back."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return f"a string holds a lone surrogate ({item[:40]!r})"
    return None


def parse_model(model: type[BaseModel], value: Any) -> Any:
    """``value`` as ``model``; :class:`BadRequest` (422) naming the first field in error."""
    if not isinstance(value, dict):
        raise BadRequest(422, f"the body must be a JSON object, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        # a union's member tag ("list[any]") is pydantic's, not a field the client sent
        field = ".".join(str(part) for part in first["loc"] if "[" not in str(part)) or None
        raise BadRequest(422, f"{field or 'body'}: {first['msg']}", field=field) from None
