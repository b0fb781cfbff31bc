"""Per requirement, what shadow mode recorded: how often it would have blocked, when, and on which calls.

``policyguard audit report TRACE...`` reads the ``decision`` events of one or
more traces (format policyguard.trace/1) and answers the question a team asks
before promoting a rule from ``mode: shadow`` to ``enforce``: does it block what
it should, and only that?
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .inv1 import TraceFormatError

EXAMPLES = 3


class RequirementRecord(BaseModel):
    """One requirement's record in shadow mode."""

    model_config = ConfigDict(extra="forbid")

    id: str
    would_block: int = 0
    judged: int = Field(default=0, description="Decisions that judged this requirement at all.")
    first_seen: str | None = None
    last_seen: str | None = None
    examples: list[str] = Field(default_factory=list, description="Up to three would-block calls: tool, id, file:line.")


class ShadowReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: int = 0
    shadow_allowed: int = Field(default=0, description="Calls allowed although a shadowed rule would block them.")
    requirements: list[RequirementRecord] = Field(default_factory=list)


def shadow_report(paths: list[str | Path]) -> ShadowReport:
    """The report over every ``decision`` event in ``paths``; an unreadable line is a :class:`TraceFormatError`."""
    records: dict[str, RequirementRecord] = {}
    report = ShadowReport()
    for path in paths:
        for number, event in _events(Path(path)):
            if event.get("event") != "decision":
                continue
            report.decisions += 1
            for result in event.get("requirements") or []:
                if isinstance(result, dict) and isinstance(result.get("id"), str):
                    records.setdefault(result["id"], RequirementRecord(id=result["id"])).judged += 1
            blocked = event.get("shadow_blocked") or []
            report.shadow_allowed += bool(blocked)
            for requirement in blocked:
                record = records.setdefault(requirement, RequirementRecord(id=requirement))
                _seen(record, event, f"{event.get('tool')} {event.get('call_id')} ({path}:{number})")
    report.requirements = sorted(records.values(), key=lambda r: (-r.would_block, r.id))
    return report


def _seen(record: RequirementRecord, event: dict[str, Any], example: str) -> None:
    record.would_block += 1
    ts = event.get("ts")
    when = datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if isinstance(ts, float) else None
    if when is not None:
        record.first_seen = min(record.first_seen or when, when)
        record.last_seen = max(record.last_seen or when, when)
    if len(record.examples) < EXAMPLES:
        record.examples.append(example)


def _events(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"cannot read the trace: {exc}", file=str(path)) from None
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise TraceFormatError(f"not JSON: {exc}", file=str(path), line=number) from None
        if not isinstance(event, dict):
            raise TraceFormatError("a trace record is a JSON object", file=str(path), line=number)
        events.append((number, event))
    return events


def report_lines(report: ShadowReport) -> list[str]:
    """The text report: a summary, then one block per requirement, the most would-blocks first."""
    lines = [f"{report.decisions} decisions, {report.shadow_allowed} allowed in shadow mode that a rule would block"]
    for record in report.requirements:
        seen = f", first {record.first_seen}, last {record.last_seen}" if record.first_seen else ""
        lines.append(f"  {record.id}: would block {record.would_block} of {record.judged} judged{seen}")
        lines += [f"      e.g. {example}" for example in record.examples]
    return lines
