"""INV-1, authorize before effect: the trace events and the replay checker.

INV-1: a tool call ``c`` may be executed only after an ``allow`` verdict issued
for exactly ``(c.call_id, c.tool, c.args_sha256)``, while that allow is still
current (not revoked, not expired), not overruled by a ``deny`` for the same
call (deny wins), and not already consumed by an earlier execute. A second
side effect under the same idempotency key breaks the ledger invariant.

Events are records of a :class:`policyguard.trace.Trace` (format
``policyguard.trace/1``, see ``docs/trace-format.md``). The checker replays a
trace in order and reports every execute that broke INV-1, so any system that
writes these records (not only PolicyGuard) can be audited after the fact.
Records of other kinds (``decision`` ...) are ignored; unknown fields are
allowed (newer writers may add some), missing required fields are errors that
name the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import PolicyGuardError

TRACE_MAJOR = "policyguard.trace/1"
INV1_KINDS = ("submit", "allow", "deny", "execute", "effect", "revoke")

ViolationKind = Literal["denied", "no_allow", "args_changed", "revoked", "expired", "replay", "duplicate_effect"]
VIOLATION_KINDS: tuple[ViolationKind, ...] = (
    "denied",
    "no_allow",
    "args_changed",
    "revoked",
    "expired",
    "replay",
    "duplicate_effect",
)


class TraceFormatError(PolicyGuardError):
    """A trace line is not valid JSON or an INV-1 event lacks a required field."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.file = file
        self.line = line
        where = file or "<trace>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {message}")


class _Event(BaseModel):
    """Fields every INV-1 event carries. Unknown fields are kept (forward compatible)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    v: str | None = None
    event: str
    t: int = Field(description="Logical clock, strictly increasing within one trace.")
    ts: float = Field(description="Wall clock, epoch seconds.")


class _CallEvent(_Event):
    call_id: str
    tool: str
    args_sha256: str


class SubmitEvent(_CallEvent):
    """The agent asked for a call."""

    event: Literal["submit"]


class AllowEvent(_CallEvent):
    """The policy allowed exactly this call, under ``policy_version``, until ``expires_at``."""

    event: Literal["allow"]
    policy_version: str
    expires_at: float


class DenyEvent(_CallEvent):
    """The policy denied this call. A deny for a call_id overrules any allow for it."""

    event: Literal["deny"]
    policy_version: str | None = None


class ExecuteEvent(_CallEvent):
    """The executor let this call through to the tool (the INV-1 denominator)."""

    event: Literal["execute"]


class EffectEvent(_CallEvent):
    """A side effect was committed (a ledger row, a payment ...)."""

    event: Literal["effect"]
    idempotency_key: str | None = None


class RevokeEvent(_Event):
    """The policy changed to ``policy_version``: allows under any other version are void.

    With a ``call_id``, only that call's earlier allows are revoked.
    """

    event: Literal["revoke"]
    policy_version: str
    call_id: str | None = None


Inv1Event = SubmitEvent | AllowEvent | DenyEvent | ExecuteEvent | EffectEvent | RevokeEvent

_MODELS: dict[str, type[_Event]] = {
    "submit": SubmitEvent,
    "allow": AllowEvent,
    "deny": DenyEvent,
    "execute": ExecuteEvent,
    "effect": EffectEvent,
    "revoke": RevokeEvent,
}


def parse_event(record: dict[str, Any], *, file: str | None = None, line: int | None = None) -> Inv1Event | None:
    """Validate one trace record; ``None`` for kinds INV-1 does not look at."""
    kind = record.get("event")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        if "event" not in record:
            raise TraceFormatError("record has no 'event' field", file=file, line=line)
        return None
    version = record.get("v")
    if version is not None and version != TRACE_MAJOR:
        raise TraceFormatError(f"unsupported trace format {version!r} (expected {TRACE_MAJOR!r})", file=file, line=line)
    try:
        return model.model_validate(record)  # type: ignore[return-value]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "record"
        raise TraceFormatError(f"{kind} event: field {name!r}: {first['msg']}", file=file, line=line) from exc


def parse_events(records: Iterable[dict[str, Any]], *, file: str | None = None) -> list[tuple[int, Inv1Event]]:
    """Validate in-memory records (e.g. ``Trace.events``); line numbers count from 1."""
    parsed: list[tuple[int, Inv1Event]] = []
    for number, record in enumerate(records, start=1):
        event = parse_event(record, file=file, line=number)
        if event is not None:
            parsed.append((number, event))
    return parsed


def read_events(path: str | Path) -> tuple[int, list[tuple[int, Inv1Event]]]:
    """Read a JSONL trace: (number of records, INV-1 events with their file line)."""
    name = str(path)
    parsed: list[tuple[int, Inv1Event]] = []
    records = 0
    try:
        handle = Path(path).open(encoding="utf-8")
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace: {exc.strerror or exc}", file=name) from exc
    with handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                raise TraceFormatError(f"not JSON: {exc}", file=name, line=number) from exc
            if not isinstance(record, dict):
                raise TraceFormatError("expected a JSON object", file=name, line=number)
            records += 1
            event = parse_event(record, file=name, line=number)
            if event is not None:
                parsed.append((number, event))
    return records, parsed


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


def audit(events: Iterable[tuple[int, Inv1Event] | Inv1Event], *, records: int | None = None) -> AuditReport:
    """Replay INV-1 events in trace order and report every violation.

    Each execute is judged once, against the first failing rule in this order:
    ``denied`` (any earlier deny for the call_id), ``no_allow`` (no earlier
    allow for the call_id), ``args_changed`` (allows exist but none for this
    tool and args hash), ``revoked`` (the newest matching allow was issued under
    a policy version a later revoke replaced, or was revoked for this call),
    ``expired`` (the execute's ``ts`` is past the allow's ``expires_at``),
    ``replay`` (the call_id was already executed: one allow, one execute).
    Every effect reusing an earlier effect's idempotency key is a
    ``duplicate_effect``.
    """
    calls: dict[str, _Call] = {}
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
                call = calls.setdefault(event.call_id, _Call())
                call.allow_revoked_before = len(call.allows)
            continue
        if isinstance(event, SubmitEvent):
            continue
        call = calls.setdefault(event.call_id, _Call())
        if isinstance(event, AllowEvent):
            call.allows.append(event)
        elif isinstance(event, DenyEvent):
            call.denied = True
        elif isinstance(event, ExecuteEvent):
            executes += 1
            found = _judge(event, call, current_version)
            call.executed = True
            if found is not None:
                kind, detail = found
                violations.append(
                    Violation(kind=kind, line=line, t=event.t, call_id=event.call_id, tool=event.tool, detail=detail)
                )
        elif isinstance(event, EffectEvent):
            effects += 1
            key = event.idempotency_key
            if key is None:
                continue
            if key in effect_keys:
                violations.append(
                    Violation(
                        kind="duplicate_effect",
                        line=line,
                        t=event.t,
                        call_id=event.call_id,
                        tool=event.tool,
                        detail=f"idempotency key {key!r} already took effect at line {effect_keys[key]}",
                    )
                )
            else:
                effect_keys[key] = line
    return AuditReport(
        records=records if records is not None else count,
        events=count,
        executes=executes,
        effects=effects,
        violations=violations,
    )


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


def audit_file(path: str | Path) -> AuditReport:
    """Read and audit a JSONL trace file (raises TraceFormatError naming file:line)."""
    records, events = read_events(path)
    return audit(events, records=records)


def audit_records(records: list[dict[str, Any]]) -> AuditReport:
    """Audit in-memory trace records (``Trace.events``)."""
    return audit(parse_events(records), records=len(records))
