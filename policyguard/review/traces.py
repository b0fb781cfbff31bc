"""The decision browser's data: guard decisions from trace files, filtered, with INV-1 findings.

A trace file that cannot be read or audited is shown as a one-line problem on
the page (file and line), never a traceback: the browser is a view, not a gate.
Files are re-read on each request (they grow while agents run); a file above
``max_records`` shows its first records and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policyguard.audit.inv1 import Violation, audit_records
from policyguard.audit.trace import read_trace
from policyguard.errors import PolicyGuardError

MAX_RECORDS = 200_000


class DecisionRow(BaseModel):
    """One guard decision as the browser lists it."""

    model_config = ConfigDict(extra="forbid")

    file: int = Field(description="Index of the trace file in the console's list.")
    t: int
    ts: float | None = None
    call_id: str | None = None
    tool: str | None = None
    outcome: str | None = None
    stage: str | None = None
    principal: str | None = None
    remediation: str | None = None
    requirements: list[dict[str, Any]] = Field(default_factory=list)
    record: dict[str, Any]
    findings: list[Violation] = Field(default_factory=list)
    fetches: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The reads the guard made itself while judging this call (``fetch`` trace events).",
    )

    @property
    def failed(self) -> list[str]:
        return [str(r.get("id")) for r in self.requirements if r.get("status") in ("NOT_MET", "UNVERIFIED")]


class TraceView(BaseModel):
    """One trace file: its decisions, its INV-1 findings, or why it could not be read."""

    model_config = ConfigDict(extra="forbid")

    index: int
    path: str
    decisions: list[DecisionRow] = Field(default_factory=list)
    findings: list[Violation] = Field(default_factory=list)
    problem: str | None = None
    truncated: bool = False


def load(paths: Sequence[str | Path], *, max_records: int = MAX_RECORDS) -> list[TraceView]:
    """Every file's decisions and findings (a file's problem is reported in its view)."""
    return [_load_one(index, Path(path), max_records) for index, path in enumerate(paths)]


def _load_one(index: int, path: Path, max_records: int) -> TraceView:
    view = TraceView(index=index, path=str(path))
    try:
        records = read_trace(path)
    except (OSError, ValueError) as exc:
        view.problem = _one_line(str(exc) if isinstance(exc, ValueError) else f"{path}: {exc.strerror or exc}")
        return view
    if len(records) > max_records:
        records, view.truncated = records[:max_records], True
    try:
        view.findings = audit_records(records).violations
    except PolicyGuardError as exc:
        view.problem = _one_line(f"{path}: audit: {exc}")
    by_call: dict[str | None, list[Violation]] = {}
    for finding in view.findings:
        by_call.setdefault(finding.call_id, []).append(finding)
    fetched: dict[str, list[dict[str, Any]]] = {}  # a call's fetch events come before its decision
    for record in records:
        if record.get("event") == "fetch" and isinstance(record.get("for_call_id"), str):
            fetched.setdefault(record["for_call_id"], []).append(record)
            continue
        if record.get("event") != "decision":
            continue
        row = _row(index, record, by_call)
        if row is not None:
            if row.call_id is not None:
                row.fetches = fetched.pop(row.call_id, [])
            view.decisions.append(row)
    return view


def _row(index: int, record: dict[str, Any], by_call: dict[str | None, list[Violation]]) -> DecisionRow | None:
    t = record.get("t")
    if not isinstance(t, int) or isinstance(t, bool):
        return None
    requirements = record.get("requirements")
    call_id = _text(record.get("call_id"))
    return DecisionRow(
        file=index,
        t=t,
        ts=record.get("ts") if isinstance(record.get("ts"), (int, float)) else None,
        call_id=call_id,
        tool=_text(record.get("tool")),
        outcome=_text(record.get("outcome")),
        stage=_text(record.get("stage")),
        principal=_text(record.get("principal")),
        remediation=_text(record.get("remediation")),
        requirements=[r for r in requirements if isinstance(r, dict)] if isinstance(requirements, list) else [],
        record=record,
        findings=by_call.get(call_id, []) if call_id is not None else [],
    )


def filtered(
    views: Sequence[TraceView], *, outcome: str = "", tool: str = "", requirement: str = ""
) -> list[DecisionRow]:
    """Decisions of every file matching each filter given (requirement: among the failed ones), newest first."""
    rows = [
        row
        for view in views
        for row in view.decisions
        if (not outcome or row.outcome == outcome)
        and (not tool or row.tool == tool)
        and (not requirement or requirement in row.failed)
    ]
    return sorted(rows, key=lambda r: (r.ts or 0.0, r.file, r.t), reverse=True)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
