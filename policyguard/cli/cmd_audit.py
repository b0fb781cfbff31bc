"""``policyguard audit TRACE.jsonl``: replay a trace and report INV-1 violations."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.audit.inv1 import AuditReport


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "audit",
        help="check a JSONL trace for INV-1 (authorize-before-effect) and ledger violations",
        description=(
            "Replays submit/allow/deny/execute/effect/revoke events (format policyguard.trace/1, "
            "docs/trace-format.md). Exit 0 when clean, 1 when any violation is found, 2 when the "
            "trace cannot be audited: unreadable, not JSON, an unknown event kind, a logical clock "
            "that does not increase, a missing field, or no records at all (the message names file:line)."
        ),
    )
    parser.add_argument("trace", help="the JSONL trace file")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from policyguard.audit.inv1 import audit_file

    report = audit_file(args.trace)  # TraceFormatError -> exit 2 via cli.main
    if args.json:
        print(json.dumps({"trace": args.trace, "ok": report.ok, **report.model_dump(mode="json")}, indent=2))
    else:
        for line in report_lines(args.trace, report):
            print(line, file=sys.stdout)
    return 0 if report.ok else 1


def report_lines(trace: str, report: AuditReport) -> list[str]:
    """The text report: a summary line, one line per violation, then the counts by kind (``demo`` prints it too)."""
    lines = [
        f"{trace}: {report.records} records, {report.events} INV-1 events, "
        f"{report.executes} executes, {report.effects} effects, {len(report.violations)} violations"
    ]
    lines += [f"  line {v.line}: {v.kind}: call {v.call_id} ({v.tool}): {v.detail}" for v in report.violations]
    if report.violations:
        kinds = ", ".join(f"{k}={n}" for k, n in report.counts().items() if n)
        lines.append(f"violations by kind: {kinds}")
    return lines
