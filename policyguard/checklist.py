"""The checklist file: per-tool requirements derived from a policy.

A checklist belongs to one policy text, identified by its sha256. For every
tool it says whether the tool mutates state and which requirements a call must
meet. A requirement is either ``data`` (verifiable from tool results, often
with a deterministic ``check`` in CEL that the hard gate proves) or
``procedural`` (what was said in the dialogue: left to the verifier model).

Tools the checklist does not name are mutating: an unknown tool is never let
through unverified. Tool keys may be exact names or globs (``update_*``); an
exact name wins over a glob, and among globs the first listed wins.
"""

from __future__ import annotations

import fnmatch
import json
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .canonical import canonical_json, policy_version, sha256_hex
from .errors import ChecklistError
from .yamlsource import LocatedYaml, load_yaml_file, load_yaml_text

SCHEMA_VERSION: Literal[1] = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Example(_Model):
    """A worked case for a ``check``: the inputs and whether they comply."""

    args: dict[str, Any] = Field(default_factory=dict)
    facts: dict[str, Any] = Field(default_factory=dict)
    principal: str | None = None
    complies: bool
    note: str | None = None


class Requirement(_Model):
    """One atomic requirement a mutating call must meet."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    text: str = Field(min_length=1)
    kind: Literal["data", "procedural"]
    source: str = Field(min_length=1, description="The policy sentence this requirement comes from, quoted.")
    prerequisites: list[str] = Field(
        default_factory=list, description="Read-only tools whose results this requirement needs."
    )
    check: str | None = Field(
        default=None,
        description="A CEL expression over args, facts, principal and now; true means the call complies.",
    )
    examples: list[Example] = Field(default_factory=list)


class EffectSpec(_Model):
    """The side effect a tool has, so the executor can keep a ledger of it.

    For ``money`` the executor reads the amount, transaction and idempotency key
    from the named arguments, claims the key in the ledger before calling the
    tool (a retry with the same key returns the recorded result, never a second
    effect) and refuses any amount that would take the transaction's total
    beyond what was captured.
    """

    kind: Literal["money"] = "money"
    amount_arg: str = Field(default="amount", description="Argument holding the amount.")
    currency_arg: str | None = Field(default=None, description="Argument holding the currency, if any.")
    transaction_arg: str = Field(description="Argument naming the transaction (order, payment) the money moves on.")
    idempotency_arg: str = Field(
        default="idempotency_key", description="Argument holding the key that makes retries safe; required."
    )
    resource_arg: str | None = Field(
        default=None, description="Argument that must equal the resource the grant was issued for."
    )
    ceiling: float | None = Field(default=None, description="Largest amount one call may move, whatever the grant.")
    approval_threshold: float | None = Field(
        default=None, description="Amounts above this need a recorded human approval (the gate checks it)."
    )


class ToolSpec(_Model):
    """What the checklist says about one tool (or a glob of tools)."""

    mutating: bool = True
    description: str | None = None
    requirements: list[Requirement] = Field(default_factory=list)
    effect: EffectSpec | None = Field(
        default=None, description="The tool's side effect, when the executor must keep a ledger of it."
    )


class FactSource(_Model):
    """Where a named fact comes from: the results of a read tool.

    ``match`` maps the read tool's argument to a CEL expression over the pending
    call's ``args``, the ``principal`` and facts resolved before this one; those
    values are the fact's *keys*. ``collect`` says what the fact is:

    * ``newest`` (default): the record the newest matching read (or
      ``refreshed_by`` write) returned, bound to its keys (``bind``), unless a
      later write changed it (``refreshed_by`` with an unreadable result,
      ``invalidated_by``). Ordering is by CALL order, never by where a result
      was appended. Missing when there is none; the gate then blocks saying why.
    * ``all``: the list of every successful result of ``tool``/``also`` whose
      arguments match, in call order (never missing; may be empty).
    * ``calls``: the list of every earlier call of ``tool``/``also`` whose
      arguments match, in call order, as ``{args, result, error}``.
    """

    tool: str
    match: dict[str, str] = Field(default_factory=dict)
    collect: Literal["newest", "all", "calls"] = Field(
        default="newest",
        description=(
            "What the fact is. 'newest': the record returned by the newest call (in CALL order) of `tool`, "
            "`also` or a `refreshed_by` write whose arguments equal the keys, bound to the keys (see `bind`), "
            "and not changed since by an `invalidated_by` write; missing otherwise, with the reason (no read "
            "yet, read failed, result not JSON, result over a size/depth limit, record for another key, "
            "changed by a later write). 'all': a list of the parsed JSON of every successful (non-error, "
            "readable JSON within the limits) result of `tool` or `also` whose call arguments match `match` "
            "(which may be {}), in call order; never missing, an empty list is a value (existence checks, "
            "e.g. a flight appeared in some search result). 'calls': a list with one entry per earlier call "
            "of `tool` or `also` whose arguments match, in call order, each {\"args\": {...}, \"result\": "
            "parsed JSON or null, \"error\": bool}; every call counts, including one with no result yet or an "
            "unreadable result, and only an explicit error result has error: true (e.g. at most one "
            "certificate per conversation: facts.sent.filter(c, !c.error).size() == 0). The integrator's "
            "StateResolver is asked only for 'newest' facts."
        ),
    )
    also: list[str] = Field(
        default_factory=list,
        description="More tools read the same way as `tool` (e.g. search_onestop_flight beside search_direct_flight).",
    )
    bind: dict[str, str] | None = Field(
        default=None,
        description=(
            "Record binding for a 'newest' fact: a result is the fact only if the record it returns is the one "
            "asked for. Default (null): for every `match` argument NAME the result must be a JSON object whose "
            "field NAME equals the key (get_reservation_details -> reservation_id, get_user_details -> user_id, "
            "get_order_details -> order_id). {argument: dotted.field.path} names the record field per argument; "
            "{} turns binding off. A result that lacks the field or holds another value is not the fact "
            "('the get_reservation_details result is for another record')."
        ),
    )
    refreshed_by: list[str] = Field(
        default_factory=list,
        description=(
            "Write tools whose successful result is the updated record, called with the same key "
            "arguments (e.g. update_reservation_flights returns the reservation). The newest call (in call "
            "order) of the read tool or of these writes decides: a write the agent made is not judged on "
            "the state before it, and a write whose result cannot be read as the bound record (error, plain "
            "text, no result yet, another record) makes the fact missing until it is read again (fail closed)."
        ),
    )
    invalidated_by: list[str] = Field(
        default_factory=list,
        description=(
            "Write tools that change the record without returning it (e.g. book_reservation spends a "
            "certificate in the user's profile). A call of one of them made after the fact's newest read, "
            "whose arguments agree with the fact's keys on every key name they share (or share none), makes "
            "the fact missing: it must be read again."
        ),
    )
    description: str | None = None

    @model_validator(mode="after")
    def _newest_only_options(self) -> FactSource:
        if self.collect != "newest":
            used = [
                name
                for name, value in (
                    ("bind", self.bind),
                    ("refreshed_by", self.refreshed_by),
                    ("invalidated_by", self.invalidated_by),
                )
                if value
            ]
            if used:
                raise ValueError(f"{', '.join(used)} only apply to collect: newest, not collect: {self.collect}")
        if self.bind is not None:
            unknown = sorted(set(self.bind) - set(self.match))
            if unknown:
                raise ValueError(f"bind names argument(s) {unknown} that match does not compute")
        return self


class PrincipalSource(_Model):
    """Where the authenticated user comes from when the integrator does not say.

    The principal is the value of ``field`` in the result of the FIRST
    successful call of ``tool`` in the trajectory (tau2: ``get_user_details`` /
    ``user_id`` - the agent authenticates the user by looking them up). It is a
    tool result, so it is trusted; what the user types is not.
    """

    tool: str
    field: str


class PolicyRef(_Model):
    """The policy this checklist was written for."""

    name: str
    version: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    path: str | None = None


class Checklist(_Model):
    """A whole checklist file."""

    schema_version: Literal[1] = SCHEMA_VERSION
    policy: PolicyRef
    clock: datetime | None = Field(
        default=None, description="The policy's fixed 'now', if it declares one (timezone-aware)."
    )
    facts: dict[str, FactSource] = Field(default_factory=dict)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    general_rules: list[Requirement] = Field(
        default_factory=list, description="Requirements that apply to every mutating call."
    )
    principal: PrincipalSource | None = Field(
        default=None, description="Where to read the authenticated user id when the integrator gives none."
    )

    _source: LocatedYaml | None = PrivateAttr(default=None)

    @property
    def source(self) -> LocatedYaml | None:
        """Where the checklist was loaded from (file and lines), if from YAML."""
        return self._source

    def error_at(self, message: str, path: tuple[str | int, ...]) -> ChecklistError:
        """A ChecklistError pointing at ``path`` in the source file, when known."""
        if self._source is not None:
            return self._source.error(message, path)
        return ChecklistError(message, field=".".join(str(p) for p in path) or None)

    @field_validator("clock")
    @classmethod
    def _clock_is_aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("clock must carry a timezone offset, e.g. 2024-05-15T15:00:00-05:00")
        return value

    @cached_property
    def version(self) -> str:
        """This checklist's own version: the sha256 of its canonical content."""
        return "sha256:" + sha256_hex(canonical_json(self.model_dump(mode="json")))

    def tool_spec(self, tool: str) -> ToolSpec | None:
        """The spec for ``tool``: exact key first, then the first matching glob."""
        if tool in self.tools:
            return self.tools[tool]
        for pattern, spec in self.tools.items():
            if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(tool, pattern):
                return spec
        return None

    def is_mutating(self, tool: str) -> bool:
        """False only when the checklist declares the tool read-only."""
        spec = self.tool_spec(tool)
        return True if spec is None else spec.mutating

    def requirements_for(self, tool: str) -> list[Requirement]:
        """The tool's own requirements followed by the general rules."""
        spec = self.tool_spec(tool)
        own = spec.requirements if spec is not None else []
        return [*own, *self.general_rules]

    def check_policy(self, policy_text: str) -> None:
        """Raise if ``policy_text`` is not the policy this checklist was written for."""
        actual = policy_version(policy_text)
        if actual != self.policy.version:
            raise ChecklistError(
                f"policy version mismatch: checklist expects {self.policy.version}, the policy text is {actual}",
                field="policy.version",
            )

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()


def _from_located(doc: LocatedYaml) -> Checklist:
    if not isinstance(doc.data, dict):
        raise ChecklistError("a checklist must be a YAML mapping", file=doc.file, line=1)
    try:
        checklist = Checklist.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc: tuple[str | int, ...] = tuple(first["loc"])
        more = len(exc.errors()) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise doc.error(first["msg"] + suffix, loc) from exc
    ids: dict[str, tuple[str | int, ...]] = {}
    for name, spec in checklist.tools.items():
        for index, req in enumerate(spec.requirements):
            path: tuple[str | int, ...] = ("tools", name, "requirements", index, "id")
            if req.id in ids:
                raise doc.error(f"duplicate requirement id {req.id!r}", path)
            ids[req.id] = path
    for index, req in enumerate(checklist.general_rules):
        path = ("general_rules", index, "id")
        if req.id in ids:
            raise doc.error(f"duplicate requirement id {req.id!r}", path)
        ids[req.id] = path
    checklist._source = doc
    return checklist


def load_checklist(path: str | Path) -> Checklist:
    """Load and validate a checklist file; errors name the file, line and field."""
    return _from_located(load_yaml_file(path))


def parse_checklist(text: str, file: str = "<string>") -> Checklist:
    """Load a checklist from YAML text."""
    return _from_located(load_yaml_text(text, file=file))


def checklist_schema_json() -> str:
    """The JSON Schema of the checklist file, pretty-printed."""
    return json.dumps(Checklist.json_schema(), indent=2)
