"""``policyguard audit TRACE.jsonl``: replay a trace and report INV-1 violations.

``policyguard audit report TRACE.jsonl...``: per requirement, what shadow mode recorded.
"""

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
            "that does not increase, a missing field, or no records at all (the message names file:line). "
            "'policyguard audit report TRACE.jsonl...' instead gives, per requirement, how many calls it would "
            "have blocked in shadow mode, when first and last, and example calls (exit 0; 2 unreadable)."
        ),
    )
    parser.add_argument("trace", nargs="+", metavar="TRACE", help="the JSONL trace file (or: report TRACE...)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from policyguard.audit.inv1 import audit_file
    from policyguard.errors import ConfigError

    if args.trace[0] == "report" and len(args.trace) > 1:
        return _shadow_report(args.trace[1:], as_json=args.json)
    if len(args.trace) > 1:
        raise ConfigError("audit checks one trace; for several, 'policyguard audit report TRACE...'")
    trace = args.trace[0]
    report = audit_file(trace)  # TraceFormatError -> exit 2 via cli.main
    if args.json:
        print(json.dumps({"trace": trace, "ok": report.ok, **report.model_dump(mode="json")}, indent=2))
    else:
        for line in report_lines(trace, report):
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


def _shadow_report(traces: list[str], *, as_json: bool) -> int:
    from policyguard.audit.shadowreport import report_lines as shadow_lines
    from policyguard.audit.shadowreport import shadow_report

    report = shadow_report(list(traces))
    if as_json:
        print(json.dumps({"traces": traces, **report.model_dump(mode="json")}, indent=2))
    else:
        print("\n".join(shadow_lines(report)))
    return 0
