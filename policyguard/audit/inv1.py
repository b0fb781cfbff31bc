"""INV-1, authorize before effect: the trace events and the replay checker.

INV-1: a tool call ``c`` may be executed only after an ``allow`` verdict issued
for exactly ``(c.call_id, c.tool, c.args_sha256)``, while that allow is still
current (not revoked, not expired), not overruled by a ``deny`` for the same
call (deny wins), and not already consumed by an earlier execute. Every side
effect must come from such an execute, one effect per execute, and a second
side effect under the same idempotency key breaks the ledger invariant.

Events are records of a :class:`policyguard.audit.trace.Trace` (format
``policyguard.trace/1``, see ``docs/trace-format.md``). The checker replays a
trace in order and reports every execute and effect that broke INV-1, so any
system that writes these records (not only PolicyGuard) can be audited after
the fact.

The format is read strictly, because a trace the checker misreads proves
nothing: every record needs the format version ``v`` (exactly
``policyguard.trace/1``; absent or ``null`` is an error), a known ``event`` kind (a near miss such as
``"Execute"`` is an error, not an ignored record), an integer ``t`` greater
than the previous record's and a finite ``ts``; INV-1 events need their fields
with their exact JSON types; an empty trace is an error. Unknown *fields* are
allowed (newer writers may add some); unknown *kinds* only with the ``x-``
prefix. Every such problem raises :class:`TraceFormatError` naming file, line
and field (``policyguard audit`` exits 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policyguard.errors import PolicyGuardError
from policyguard.trajectory.limits import LimitError, loads_json

TRACE_MAJOR = "policyguard.trace/1"
INV1_KINDS = ("submit", "allow", "deny", "execute", "effect", "revoke")
APPROVAL_KINDS = ("escalate", "approve")
"""A call escalated to a person, and a person's approval (a person's refusal is a ``deny`` with ``approval_id``)."""
OTHER_KINDS = ("decision", "executor_refused")
"""Record kinds PolicyGuard writes that INV-1 does not judge."""
EXTENSION_PREFIX = "x-"
"""Kinds starting with this are other writers' own records; the checker skips them."""

ViolationKind = Literal[
    "denied",
    "no_allow",
    "args_changed",
    "revoked",
    "expired",
    "replay",
    "effect_without_execute",
    "extra_effect",
    "duplicate_effect",
    "unapproved",
    "approval_mismatch",
    "approval_reused",
]
VIOLATION_KINDS: tuple[ViolationKind, ...] = get_args(ViolationKind)


class TraceFormatError(PolicyGuardError):
    """The trace cannot be audited: unreadable, not JSON, an unknown kind, clock disorder,
    a missing or ill-typed field, or no records at all. The message is one line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.file = file
        self.line = line
        where = file or "<trace>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {_one_line(message)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Record(BaseModel):
    """The fields every record carries, with their exact JSON types (``strict``)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    v: str
    event: str
    t: int = Field(description="Logical clock, strictly increasing within one trace.")
    ts: float = Field(allow_inf_nan=False, description="Wall clock, epoch seconds.")


class _CallEvent(_Record):
    call_id: str
    tool: str
    args_sha256: str


class SubmitEvent(_CallEvent):
    """The agent asked for a call."""

    event: Literal["submit"]


class AllowEvent(_CallEvent):
    """The policy allowed exactly this call, under ``policy_version``, until ``expires_at``.

    With ``approval_id`` the allow spends a person's approval (see :class:`ApproveEvent`).
    """

    event: Literal["allow"]
    policy_version: str
    expires_at: float = Field(allow_inf_nan=False)
    approval_id: str | None = None


class DenyEvent(_CallEvent):
    """The policy denied this call. A deny for a call_id overrules any allow for it.

    With ``approval_id`` it is a reviewer's refusal of that approval request: no allow may spend it.
    """

    event: Literal["deny"]
    policy_version: str | None = None
    approval_id: str | None = None


class EscalateEvent(_CallEvent):
    """The call waits for a person as approval request ``approval_id``; it did not run."""

    event: Literal["escalate"]
    approval_id: str


class ApproveEvent(_CallEvent):
    """A person approved request ``approval_id`` for exactly this tool and argument hash."""

    event: Literal["approve"]
    approval_id: str


class ExecuteEvent(_CallEvent):
    """The executor let this call through to the tool (the INV-1 denominator)."""

    event: Literal["execute"]


class EffectEvent(_CallEvent):
    """A side effect was committed (a ledger row, a payment ...) by an executed call."""

    event: Literal["effect"]
    idempotency_key: str | None = None


class RevokeEvent(_Record):
    """The policy changed to ``policy_version``: allows under any other version are void.

    With a ``call_id``, only that call's earlier allows are revoked.
    """

    event: Literal["revoke"]
    policy_version: str
    call_id: str | None = None


Inv1Event = (
    SubmitEvent | AllowEvent | DenyEvent | ExecuteEvent | EffectEvent | RevokeEvent | EscalateEvent | ApproveEvent
)

_MODELS: dict[str, type[_Record]] = {
    "submit": SubmitEvent,
    "allow": AllowEvent,
    "deny": DenyEvent,
    "execute": ExecuteEvent,
    "effect": EffectEvent,
    "revoke": RevokeEvent,
    "escalate": EscalateEvent,
    "approve": ApproveEvent,
}


def _validate(model: type[_Record], record: dict[str, Any], *, file: str | None, line: int | None) -> _Record:
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "record"
        kind = record.get("event")
        what = f"{kind} event" if isinstance(kind, str) and kind in _MODELS else "record"
        raise TraceFormatError(f"{what}: field {name!r}: {first['msg']}", file=file, line=line) from exc


def _check_kind(kind: object, *, file: str | None, line: int | None) -> None:
    if isinstance(kind, str) and (kind in _MODELS or kind in OTHER_KINDS or kind.startswith(EXTENSION_PREFIX)):
        return
    from policyguard.trajectory.toolnames import nearest

    known = (*INV1_KINDS, *APPROVAL_KINDS, *OTHER_KINDS)
    guess = nearest(kind, known) if isinstance(kind, str) else None
    hint = f" (did you mean {guess!r}?)" if guess is not None else ""
    raise TraceFormatError(
        f"unknown event kind {kind!r}{hint}; known kinds: {', '.join(known)}, "
        f"or a kind of your own starting with {EXTENSION_PREFIX!r}",
        file=file,
        line=line,
    )


def parse_event(record: object, *, file: str | None = None, line: int | None = None) -> Inv1Event | None:
    """Validate one trace record; ``None`` for known kinds INV-1 does not judge.

    Raises :class:`TraceFormatError` for a record that is not an object, lacks
    ``v``/``event``/``t``/``ts``, has an unknown kind or an unsupported ``v``, or is an
    INV-1 event with a missing or ill-typed field. The clock order is checked by
    :func:`parse_events` and :func:`read_events`, which see the records in order.
    """
    if not isinstance(record, dict):
        raise TraceFormatError("expected a JSON object", file=file, line=line)
    if "event" not in record:
        raise TraceFormatError("record has no 'event' field", file=file, line=line)
    kind = record["event"]
    _check_kind(kind, file=file, line=line)
    if "v" not in record:
        raise TraceFormatError(f"record has no 'v' field (the format version, {TRACE_MAJOR!r})", file=file, line=line)
    version = record["v"]
    if version != TRACE_MAJOR:
        raise TraceFormatError(
            f"field 'v': unsupported trace format {version!r} (expected {TRACE_MAJOR!r})", file=file, line=line
        )
    model = _MODELS.get(kind)
    if model is None:
        _validate(_Record, record, file=file, line=line)
        return None
    return _validate(model, record, file=file, line=line)  # type: ignore[return-value]


def _parse_in_order(
    numbered: Iterable[tuple[int, object]], *, file: str | None
) -> tuple[int, list[tuple[int, Inv1Event]]]:
    parsed: list[tuple[int, Inv1Event]] = []
    records = 0
    last: tuple[int, int] | None = None  # (t, line) of the previous record
    for number, record in numbered:
        records += 1
        event = parse_event(record, file=file, line=number)
        assert isinstance(record, dict)
        t = record["t"]
        if last is not None and t <= last[0]:
            raise TraceFormatError(
                f"t {t} does not follow t {last[0]} of line {last[1]}: the logical clock must strictly increase "
                "(records reordered, duplicated, or written by two writers)",
                file=file,
                line=number,
            )
        last = (t, number)
        if event is not None:
            parsed.append((number, event))
    if records == 0:
        raise TraceFormatError("no records: an empty trace is not evidence that nothing ran", file=file)
    return records, parsed


def parse_events(records: Iterable[object], *, file: str | None = None) -> list[tuple[int, Inv1Event]]:
    """Validate in-memory records (e.g. ``Trace.events``) in order; line numbers count from 1."""
    return _parse_in_order(enumerate(records, start=1), file=file)[1]


def _lines(handle: Iterable[str], name: str) -> Iterator[tuple[int, object]]:
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            yield number, loads_json(text)
        except LimitError as exc:
            raise TraceFormatError(f"not a readable record: {exc}", file=name, line=number) from exc
        except ValueError as exc:
            raise TraceFormatError(f"not JSON: {exc}", file=name, line=number) from exc


def read_events(path: str | Path) -> tuple[int, list[tuple[int, Inv1Event]]]:
    """Read a JSONL trace: (number of records, INV-1 events with their file line)."""
    name = str(path)
    try:
        handle = Path(path).open(encoding="utf-8", errors="strict")
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace: {exc.strerror or exc}", file=name) from exc
    with handle:
        try:
            return _parse_in_order(_lines(handle, name), file=name)
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"not UTF-8 text: {exc.reason}", file=name) from exc
        except OSError as exc:
            raise TraceFormatError(f"cannot read trace: {exc.strerror or exc}", file=name) from exc


class Violation(BaseModel):
    """One INV-1 (or ledger) violation: what, where in the trace, which call."""

    model_config = ConfigDict(extra="forbid")

    kind: ViolationKind
    line: int
    t: int
    call_id: str | None
    tool: str | None
    detail: str


class AuditReport(BaseModel):
    """The result of replaying one trace. ``executes`` is the denominator."""

    model_config = ConfigDict(extra="forbid")

    records: int
    events: int
    executes: int
    effects: int
    violations: list[Violation] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        """Violations per kind (every kind present, zeros included)."""
        out: dict[str, int] = dict.fromkeys(VIOLATION_KINDS, 0)
        for violation in self.violations:
            out[violation.kind] += 1
        return out


@dataclass
class _Call:
    allows: list[AllowEvent] = field(default_factory=list)
    allow_revoked_before: int = 0  # allows[:n] were revoked by a call-scoped revoke
    denied: bool = False
    executed: bool = False
    executes: list[tuple[str, str, int]] = field(default_factory=list)  # (tool, args_sha256, line)
    effects_owed: dict[tuple[str, str], int] = field(default_factory=dict)  # executes still without their effect


def _call_key(event: Any) -> tuple[str | None, str, str]:
    """Which call an event is about: its call id within its session (``session_id``, when the event has one),
    at its ``place`` (which issuance of that id it is; "" when the event names none).

    Agents number calls per conversation, so ``call_5`` of two sessions are two
    calls, and stacks that number calls per turn reuse ``call_0``: an execute is
    judged against the allows and denies of its own session and place.
    """
    session = getattr(event, "session_id", None)
    place = getattr(event, "place", None)
    return (session if isinstance(session, str) else None, event.call_id, place if isinstance(place, str) else "")


@dataclass
class _Denies:
    """The denies of one call id in one session, by place, for the calls judged at another place."""

    unplaced: set[tuple[str, str]] = field(default_factory=set)  # (tool, args_sha256) denied with no place
    placed: set[tuple[str, str]] = field(default_factory=set)  # ... denied at some place

    def refuse(self, place: str, tool: str, sha: str) -> bool:
        """A deny with no place refuses the same tool and arguments at every place; a call with no place is
        refused by a deny of the same tool and arguments at any place (as the deny store keys them)."""
        return (tool, sha) in self.unplaced or (not place and (tool, sha) in self.placed)


def audit(events: Iterable[tuple[int, Inv1Event] | Inv1Event], *, records: int | None = None) -> AuditReport:
    """Replay INV-1 events in trace order and report every violation.

    Calls are told apart by ``call_id`` within their ``session_id`` (events
    without one are in no session) and their ``place`` (events without one have
    none): an allow or deny in one session says nothing about the same call id
    in another, nor one at one place about a later call that reuses the id. A
    deny with no place refuses that tool and those arguments at every place.

    Each execute is judged once, against the first failing rule in this order:
    ``denied`` (any earlier deny for the call_id), ``no_allow`` (no earlier
    allow for the call_id), ``args_changed`` (allows exist but none for this
    tool and args hash), ``revoked`` (the newest matching allow was issued under
    a policy version a later revoke replaced, or was revoked for this call),
    ``expired`` (the execute's ``ts`` is past the allow's ``expires_at``),
    ``replay`` (the call_id was already executed: one allow, one execute).

    An allow that cites an ``approval_id`` is judged when it is read:
    ``unapproved`` (no earlier ``approve`` for it, or a reviewer's ``deny``
    of it), ``approval_mismatch`` (approved for another tool or argument
    hash), ``approval_reused`` (an earlier allow already spent it).

    Each effect is judged once too: ``effect_without_execute`` (no earlier
    execute of this call_id, tool and args hash: an effect nobody let through,
    or one that came before its allow), ``extra_effect`` (every such execute
    already had its effect: one execute, one effect), ``duplicate_effect`` (an
    earlier effect used the same idempotency key). An effect is covered by its
    execute; an execute that broke INV-1 is reported once, at the execute.

    With ``records=0``, or no events and no ``records``, the trace is empty:
    :class:`TraceFormatError`, because an empty trace is not a clean one.
    """
    calls: dict[tuple[str | None, str, str], _Call] = {}
    denies: dict[tuple[str | None, str], _Denies] = {}
    approvals: dict[str, _Approval] = {}
    current_version: str | None = None
    effect_keys: dict[str, int] = {}
    violations: list[Violation] = []
    count = executes = effects = 0
    for position, item in enumerate(events, start=1):
        line, event = item if isinstance(item, tuple) else (position, item)
        count += 1
        if isinstance(event, RevokeEvent):
            if event.call_id is None:
                current_version = event.policy_version
            else:
                call = calls.setdefault(_call_key(event), _Call())
                call.allow_revoked_before = len(call.allows)
            continue
        if isinstance(event, SubmitEvent | EscalateEvent):
            continue
        if isinstance(event, ApproveEvent):
            approvals.setdefault(event.approval_id, _Approval()).approved.append((event.tool, event.args_sha256))
            continue
        call = calls.setdefault(_call_key(event), _Call())
        found: tuple[ViolationKind, str] | None = None
        if isinstance(event, AllowEvent):
            call.allows.append(event)
            if event.approval_id is not None:
                found = _judge_approval(event, approvals.setdefault(event.approval_id, _Approval()), line)
        elif isinstance(event, DenyEvent):
            call.denied = True
            session, call_id, place = _call_key(event)
            other = denies.setdefault((session, call_id), _Denies())
            (other.placed if place else other.unplaced).add((event.tool, event.args_sha256))
            if event.approval_id is not None:
                approvals.setdefault(event.approval_id, _Approval()).denied = True
        elif isinstance(event, ExecuteEvent):
            executes += 1
            session, call_id, place = _call_key(event)
            elsewhere = denies.get((session, call_id))
            if elsewhere is not None and elsewhere.refuse(place, event.tool, event.args_sha256):
                found = "denied", "a deny for this call came earlier (deny wins)"
            else:
                found = _judge(event, call, current_version)
            call.executed = True
            call.executes.append((event.tool, event.args_sha256, line))
            key = (event.tool, event.args_sha256)
            call.effects_owed[key] = call.effects_owed.get(key, 0) + 1
        elif isinstance(event, EffectEvent):
            effects += 1
            found = _judge_effect(event, call, line, effect_keys)
        if found is not None:
            kind, detail = found
            violations.append(
                Violation(kind=kind, line=line, t=event.t, call_id=event.call_id, tool=event.tool, detail=detail)
            )
    if records == 0 or (records is None and count == 0):
        raise TraceFormatError("no records: an empty trace is not evidence that nothing ran")
    return AuditReport(
        records=records if records is not None else count,
        events=count,
        executes=executes,
        effects=effects,
        violations=violations,
    )


@dataclass
class _Approval:
    approved: list[tuple[str, str]] = field(default_factory=list)  # (tool, args_sha256) of each approve event
    denied: bool = False
    spent_at: int | None = None  # line of the allow that spent it


def _judge_approval(event: AllowEvent, approval: _Approval, line: int) -> tuple[ViolationKind, str] | None:
    """An allow that cites a person's approval: approved before, not denied, for this call, spent once."""
    if approval.denied:
        return "unapproved", f"approval {event.approval_id} was denied by a reviewer"
    if not approval.approved:
        return "unapproved", f"no approve event for approval {event.approval_id} before the allow"
    if (event.tool, event.args_sha256) not in approval.approved:
        return "approval_mismatch", f"approval {event.approval_id} was given for another tool or other arguments"
    if approval.spent_at is not None:
        return (
            "approval_reused",
            f"approval {event.approval_id} was already spent by the allow at line {approval.spent_at}",
        )
    approval.spent_at = line
    return None


def _judge(event: ExecuteEvent, call: _Call, current_version: str | None) -> tuple[ViolationKind, str] | None:
    if call.denied:
        return "denied", "a deny for this call came earlier (deny wins)"
    if not call.allows:
        return "no_allow", "no allow for this call_id before the execute"
    matching = [
        (index, allow)
        for index, allow in enumerate(call.allows)
        if allow.tool == event.tool and allow.args_sha256 == event.args_sha256
    ]
    if not matching:
        return "args_changed", "the allow was for another tool or other arguments"
    index, allow = matching[-1]
    if index < call.allow_revoked_before:
        return "revoked", "the allow was revoked for this call"
    if current_version is not None and allow.policy_version != current_version:
        return "revoked", f"allowed under {allow.policy_version}, policy is now {current_version}"
    if event.ts > allow.expires_at:
        return "expired", f"executed at {event.ts:.3f}, allow expired at {allow.expires_at:.3f}"
    if call.executed:
        return "replay", "this call_id was already executed"
    return None


def _judge_effect(
    event: EffectEvent, call: _Call, line: int, effect_keys: dict[str, int]
) -> tuple[ViolationKind, str] | None:
    key = (event.tool, event.args_sha256)
    owed = call.effects_owed.get(key, 0)
    found: tuple[ViolationKind, str] | None = None
    if owed > 0:
        call.effects_owed[key] = owed - 1
    elif not call.executes:
        found = "effect_without_execute", "no execute of this call_id before the effect"
    elif not any((tool, sha) == key for tool, sha, _ in call.executes):
        found = "effect_without_execute", "the call was executed with another tool or other arguments"
    else:
        lines = ", ".join(str(n) for tool, sha, n in call.executes if (tool, sha) == key)
        found = "extra_effect", f"each execute of this call (line {lines}) already had its effect"
    idem = event.idempotency_key
    if idem is None:
        return found
    first = effect_keys.setdefault(idem, line)
    if found is None and first != line:
        found = "duplicate_effect", f"idempotency key {idem!r} already took effect at line {first}"
    return found


def audit_file(path: str | Path) -> AuditReport:
    """Read and audit a JSONL trace file (raises TraceFormatError naming file:line)."""
    records, events = read_events(path)
    return audit(events, records=records)


def audit_records(records: list[Any]) -> AuditReport:
    """Audit in-memory trace records (``Trace.events``); raises TraceFormatError like :func:`audit_file`."""
    return audit(parse_events(records), records=len(records))
