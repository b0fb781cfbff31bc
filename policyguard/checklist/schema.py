"""The checklist file: per-tool requirements derived from a policy.

A checklist belongs to one policy text, identified by its sha256. For every
tool it says whether the tool mutates state and which requirements a call must
meet. A requirement is either ``data`` (verifiable from tool results, often
with a deterministic ``check`` in CEL that the hard gate proves) or
``procedural`` (what was said in the dialogue: left to the verifier model).

Tools the checklist does not name are mutating: an unknown tool is never let
through unverified. Tool keys may be exact names or globs (``update_*``); an
exact name wins over a glob, and among globs the first listed wins.

A glob matches only plain tool names (ASCII letters, digits, ``_``, ``-`` and
``.``, the alphabet of OpenAI, Anthropic and MCP tool names) that are not a
near miss of an exact key. ``update_*`` does not match
``update_reservation_flights\u200b`` (zero-width space), ``"update_x "`` or
fullwidth letters, and ``*_reservation`` does not match ``Cancel_reservation``
when ``cancel_reservation`` is a key: such names are unknown tools, never a
tool the checklist knows under a rule meant for other names.
"""

from __future__ import annotations

import fnmatch
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from policyguard.errors import ChecklistError
from policyguard.trajectory.canonical import canonical_json, policy_version, sha256_hex
from policyguard.trajectory.toolnames import fold

from .yamlsource import LocatedYaml, load_yaml_file, load_yaml_text

SCHEMA_VERSION: Literal[1] = 1

_GLOB_CHARS = "*?["
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def is_glob(key: str) -> bool:
    """Whether a tool key is a glob pattern rather than an exact tool name."""
    return any(ch in key for ch in _GLOB_CHARS)


def glob_matches(pattern: str, name: str, exact_keys: Iterable[str] = ()) -> bool:
    """Whether glob ``pattern`` covers tool ``name``: a plain name that is no near miss of an exact key."""
    if not _PLAIN_NAME.fullmatch(name) or not fnmatch.fnmatchcase(name, pattern):
        return False
    folded = fold(name)
    return not any(fold(key) == folded and key != name for key in exact_keys)


class _Model(BaseModel):
    """Strict: a value of the wrong type is an error, never coerced.

    Lax parsing would read ``mutating: "no"`` or ``0`` as false (a write tool
    waved through as read-only), ``complies: "false"`` as false, a number as a
    clock (``clock: 0`` is 1970) and ``ceiling: "1e9"`` as a number. Integers
    are still accepted where a float is expected.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True, strict=True)


def _exact_number(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and float(value) != value:
        raise ValueError(f"{value} cannot be held exactly as a number here (limit 2**53); it would be rounded")
    return value


PositiveAmount = Annotated[float, Field(gt=0, allow_inf_nan=False), BeforeValidator(_exact_number)]
"""A finite amount above zero, held exactly: a ceiling of NaN or infinity bounds nothing, zero or less is a
typo, and an integer beyond 2**53 would be rounded (perhaps up)."""


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
    read_first: str | None = Field(
        default=None,
        description=(
            "For a check that only asks whether evidence was read (a flight appears in a search): when it is "
            "false the call is still blocked, but as a read to make first, naming this read, not as a refusal."
        ),
    )
    approvable: bool = Field(
        default=False,
        description=(
            "A person may approve a call that fails only this and other approvable requirements: with an "
            "approval queue the guard escalates such a call (waiting for a supervisor) instead of blocking it."
        ),
    )
    confirmation: bool = Field(
        default=False,
        description=(
            "The requirement is the user's confirmation of the action (an explicit yes): the verifier's MET must "
            "cite a user message after the agent's last message to the user before the action. Procedural only."
        ),
    )

    mode: Literal["enforce", "shadow"] = Field(
        default="enforce",
        description=(
            "enforce (default): a failure blocks the call. shadow: a failure is recorded as would-block "
            "(Decision.shadow_blocked, the trace, 'policyguard audit report') and the call runs; errors and "
            "missing evidence still block. Promote a rule to enforce once its record is clean."
        ),
    )

    @field_validator("confirmation")
    @classmethod
    def _confirmation_is_procedural(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("kind") == "data":
            raise ValueError(
                "confirmation: true is for procedural requirements (what the user said); no tool result shows it"
            )
        return value


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
    ceiling: PositiveAmount | None = Field(
        default=None, description="Largest amount one call may move, whatever the grant (finite, above 0)."
    )
    approval_threshold: PositiveAmount | None = Field(
        default=None,
        description=(
            "Amounts above this (finite, above 0) need a recorded human approval. The guard blocks such a call "
            "unless the requirement named by approved_by was proven MET by the gate for this very call, and the "
            "executor refuses it (needs_approval) unless its ApprovalCheck finds an approval for the same "
            "transaction covering the amount."
        ),
    )
    approved_by: str | None = Field(
        default=None,
        description=(
            "The id of this tool's requirement whose deterministic check proves the approval (e.g. an approval "
            "record bound to the same transaction and amount). Without it, amounts above approval_threshold "
            "are always blocked."
        ),
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
            'of `tool` or `also` whose arguments match, in call order, each {"args": {...}, "result": '
            'parsed JSON or null, "error": bool}; every call counts, including one with no result yet or an '
            "unreadable result, and only an explicit error result has error: true (e.g. at most one "
            "certificate per conversation: facts.sent.filter(c, !c.error).size() == 0). The integrator's "
            "StateResolver is asked only for 'newest' facts."
        ),
    )
    also: list[str] = Field(
        default_factory=list,
        description="More tools read the same way as `tool` (e.g. search_onestop_flight beside search_direct_flight).",
    )
    scalar: bool = Field(
        default=False,
        description=(
            "The tool answers with a bare value as text (get_flight_status -> delayed, find_user_id_by_email -> "
            "an id): a successful result that is not JSON is the string itself (stripped). Without it such a "
            "result is unreadable (not JSON)."
        ),
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
    failed_writes_change_nothing: bool = Field(
        default=False,
        description=(
            "The tools refuse before they change anything: a `refreshed_by` or `invalidated_by` write answered "
            "with an error changed nothing, so the earlier read stays in force (tau2's environment validates "
            "every argument before it writes). Off by default: a failure may then have changed the record "
            "(fail closed). Do not set it where a host reports its own timeouts or cancellations as errors."
        ),
    )
    invalidated_when: str | None = Field(
        default=None,
        description=(
            "CEL narrowing `invalidated_by` to the writes that change what the pending call relies on: "
            "`write` is the earlier write's arguments, `args` the pending call's, `record` the record as it "
            "was read, `facts` the facts this one is found through or names here. The write makes the fact "
            "missing only when this holds (or cannot be evaluated: fail "
            "closed). E.g. a booking spends the balances of the payment methods it names and nothing else, "
            "so a later call paying with other methods needs no re-read of the profile."
        ),
    )
    fetch: str | None = Field(
        default=None,
        description=(
            "CEL over `args`, `facts` and `principal` giving the list of argument maps with which the guard may "
            "call `tool` itself when a check needs this fact and the dialogue lacks it (a `collect: all` or "
            "`calls` fact, whose `match` names no record). E.g. the product of each replaced item, from the "
            "order record: facts.order.items.filter(i, i.item_id in args.item_ids).map(i, {\"product_id\": "
            "i.product_id}). A 'newest' fact needs none: it is fetched with its match keys. Only a tool the "
            "checklist declares `mutating: false` is ever fetched."
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
                    ("invalidated_when", self.invalidated_when),
                    ("failed_writes_change_nothing", self.failed_writes_change_nothing),
                )
                if value
            ]
            if used:
                raise ValueError(f"{', '.join(used)} only apply to collect: newest, not collect: {self.collect}")
        if self.invalidated_when is not None and not self.invalidated_by:
            raise ValueError("invalidated_when narrows invalidated_by, which names no write")
        if self.bind is not None:
            unknown = sorted(set(self.bind) - set(self.match))
            if unknown:
                raise ValueError(f"bind names argument(s) {unknown} that match does not compute")
        return self


class StatedPrincipal(_Model):
    """A user id the user stated and a record the agent read confirms (see :class:`PrincipalSource`)."""

    tool: str = Field(description="The read tool whose record names the user (e.g. get_reservation_details).")
    field: str = Field(description="The record's field holding the user id (e.g. user_id).")


class PrincipalSource(_Model):
    """Where the authenticated user comes from when the integrator does not say.

    The principal is the user id of the FIRST (in call order) of these that
    authenticates someone, so a later lookup of another user never switches
    whose account is acted on:

    * a successful call of ``tool`` whose record's ``field`` is the id (tau2:
      ``get_user_details`` / ``user_id``);
    * a successful call of one of ``lookups``, tools that answer with the bare
      id as text (tau2 retail: ``find_user_id_by_email``);
    * ``stated``: a record read with ``stated.tool`` whose ``stated.field`` is an
      id the user wrote, as a whole word, in a message before that read (tau2
      airline: the user gives their user id, the reservation read carries it).
      The id comes from the trusted record; the user's text only has to contain
      it, which can make the rule stricter, never name another user.

    Each is a tool result answering the agent's own call, so it is trusted; a
    user typing "I am user X" alone is not.
    """

    tool: str
    field: str
    lookups: list[str] = Field(default_factory=list)
    stated: StatedPrincipal | None = None


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

    @model_validator(mode="after")
    def _fetch_only_read_tools(self) -> Checklist:
        for name, source in self.facts.items():
            if source.fetch is not None and self.is_mutating(source.tool):
                raise ValueError(
                    f"fact {name!r} has fetch, but its tool {source.tool!r} is not declared mutating: false: "
                    "the guard only ever calls read-only tools itself"
                )
        return self

    @field_validator("schema_version", mode="before")
    @classmethod
    def _version_is_an_integer(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"schema_version must be the integer {SCHEMA_VERSION}, got {value!r}")
        return value

    @field_validator("clock", mode="before")
    @classmethod
    def _clock_is_a_timestamp(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(
                    f"clock must be an ISO 8601 timestamp, e.g. 2024-05-15T15:00:00-05:00; got {value!r}"
                ) from None
        if value is not None and not isinstance(value, datetime):
            raise ValueError(f"clock must be an ISO 8601 timestamp with a timezone offset, not {value!r}")
        return value

    @field_validator("clock")
    @classmethod
    def _clock_is_aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("clock must carry a timezone offset, e.g. 2024-05-15T15:00:00-05:00")
        return value

    @cached_property
    def version(self) -> str:
        """This checklist's own version: the sha256 of its canonical content."""
        return "sha256:" + sha256_hex(canonical_json(_without_default_modes(self.model_dump(mode="json"))))

    def tool_key(self, tool: str) -> str | None:
        """The key that covers ``tool``: the exact key, else the first glob that matches (see the module doc)."""
        if tool in self.tools:
            return tool
        exact = [key for key in self.tools if not is_glob(key)]
        for pattern in self.tools:
            if is_glob(pattern) and glob_matches(pattern, tool, exact):
                return pattern
        return None

    def tool_spec(self, tool: str) -> ToolSpec | None:
        """The spec for ``tool``: exact key first, then the first matching glob."""
        key = self.tool_key(tool)
        return None if key is None else self.tools[key]

    def known_tool(self, tool: str) -> bool:
        """Whether the checklist names ``tool`` (exactly, or by a glob that matches it)."""
        return self.tool_key(tool) is not None

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
        """Raise if ``policy_text`` is not the policy this checklist was written for.

        The error names the checklist's file and the line of its pin when it
        was loaded from one, whoever builds the guard (``bench replay``, serve).
        """
        actual = policy_version(policy_text)
        if actual != self.policy.version:
            raise self.error_at(
                f"policy version mismatch: checklist expects {self.policy.version}, the policy text is {actual}",
                ("policy", "version"),
            )

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()


def _without_default_modes(data: dict[str, Any]) -> dict[str, Any]:
    """The dump a version hashes: ``mode: enforce`` and ``fetch: null`` (the defaults) left out, so checklists
    written before the fields existed keep their version; a shadowed requirement or a fetch changes it."""
    requirements = [r for spec in data.get("tools", {}).values() for r in spec["requirements"]]
    for requirement in [*requirements, *data.get("general_rules", [])]:
        if requirement.get("mode") == "enforce":
            del requirement["mode"]
    for source in data.get("facts", {}).values():  # likewise `fetch: null`, added later
        if source.get("fetch") is None:
            source.pop("fetch", None)
    return data


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The checklist model class that holds the value at ``path``, if one does."""
    annotation: Any = Checklist
    for part in path:
        while True:  # unwrap Optional, list[...], dict[str, ...] and Annotated down to a model
            origin = typing.get_origin(annotation)
            if origin in (typing.Union, types.UnionType):
                models = [a for a in typing.get_args(annotation) if a is not type(None)]
                annotation = models[0] if len(models) == 1 else None
            elif origin is Annotated:
                annotation = typing.get_args(annotation)[0]
            else:
                break
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            annotation = field.annotation if field is not None else None
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return None
    while typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = models[0] if len(models) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def schema_error_message(error: Mapping[str, Any]) -> str:
    """One pydantic error as a person reads it: what is wrong, the value given, what would be right."""
    kind = error["type"]
    value = error.get("input")
    loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model is not None else []
        import difflib  # only for an error's hint: a valid checklist does not load it

        guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        return f"unknown field (not in the checklist schema){hint}"
    if kind == "bool_type":
        return f"must be true or false (unquoted), got {value!r}"
    message = str(error["msg"])
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if message.startswith("Input should "):
        message = "must " + message.removeprefix("Input should ")
    if kind != "missing" and not isinstance(value, (dict, list)):
        message += f", got {value!r}"
    return message


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
        raise doc.error(schema_error_message(first) + suffix, loc) from exc
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
