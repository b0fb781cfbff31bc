"""``policyguard demo``: three real tau2 airline conversations through the guard, offline, in seconds."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from policyguard.distribution import checkout_install

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.demo import CallReport, DemoReport

WIDTH = 100
LABEL = 13

OUTCOME_WORDS = {"allow": "ALLOWED", "block": "BLOCKED", "escalate": "ESCALATED", "halt": "HALTED"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "demo",
        help="see the guard allow, block and escalate real tau2 airline calls (no key, no network, a few seconds)",
        description=(
            "Runs three short conversations built from real tau2 airline tasks through the guard with the shipped "
            "airline checklist, plus one extra rule the demo adds as your company's (refunds over $1,000 wait for "
            "a supervisor). Needs only the core install: no model is called (requirements only a verifier can "
            "judge get scripted answers shipped with the demo), no network, no server. Writes a JSONL trace and a "
            "SQLite store holding the approval queue, then audits the trace for INV-1. Exit 0 when the three "
            "outcomes come out as expected (allowed, blocked, escalated) and the audit is clean, 1 otherwise, "
            "2 on a bad --out."
        ),
    )
    parser.add_argument(
        "--out",
        default="policyguard-demo",
        metavar="DIR",
        help=(
            "folder for trace.jsonl and approvals.db (default ./policyguard-demo). Created when missing. A folder "
            "an earlier demo wrote (it holds .policyguard-demo) is reused: only the demo's own files in it are "
            "replaced. Any other non-empty folder, or a file, is refused (exit 2)."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary instead of the story")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from policyguard.demo import run_demo

    report = run_demo(Path(args.out))  # ConfigError (a bad --out) -> one line, exit 2 via cli.main
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        for line in story(report):
            print(line)
    return 0 if report.ok else 1


def _field(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=f"  {label:<{LABEL - 2}}",
        subsequent_indent=" " * LABEL,
        break_on_hyphens=False,
        break_long_words=False,
    )


def story(report: DemoReport) -> list[str]:
    """The narration: what the demo runs on, each call and its outcome, the audit, the next steps."""
    from .cmd_audit import report_lines

    version = report.policy_version
    lines = [
        "policyguard demo: three real tau2 airline conversations through the guard (no model, no network, no server)",
        "",
        *_field("policy", f"the tau2 airline policy.md, {version[:15]}...{version[-4:]}, the version "
                "checklists/airline.yaml pins"),
        *_field("checklist", "checklists/airline.yaml, plus YOUR COMPANY'S EXTRA RULE, which the demo adds "
                "(company_rules.yaml; the tau2 policy has no approval step): a cancellation that refunds more "
                "than $1,000 waits for a supervisor's approval"),
        *_field("verifier", "SCRIPTED: for the requirements only a verifier can judge (the user's reason, "
                "their yes), answers shipped with the demo are played back. No model is called; no model "
                "judged anything here."),
        *_field("tools", "an allowed write runs through GuardedExecutor with its signed single-use grant; the "
                "tool returns tau2's recorded result (nothing real is cancelled)"),
    ]  # fmt: skip
    for number, call in enumerate(report.calls, 1):
        lines += ["", f"[{number}/{len(report.calls)}] tau2 airline task {call.task_id}: {call.title}"]
        lines += _call_lines(call)
    lines += ["", "INV-1 audit of the trace (the same code as `policyguard audit`):"]
    lines += [f"  {line}" for line in report_lines(report.trace, report.audit)]
    if report.audit_ok:
        lines += textwrap.wrap(
            "clean: every execute followed a current allow for exactly its call id, tool and argument hash (not "
            "revoked, expired, denied or already used), and every effect came from such an execute",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="  ",
        )
    lines.append("")
    if report.ok:
        lines.append("All three outcomes came out as expected: allowed, blocked, escalated.")
    else:
        wrong = [f"{c.conversation} (got {c.outcome})" for c in report.calls if not c.as_expected]
        lines.append("NOT as expected: " + (", ".join(wrong) or "the audit found violations"))
    waiting = next((c.approval_id for c in report.calls if c.approval_id), None)
    lines += ["", "Next steps:"]
    lines.append(f"  policyguard approvals list --store {report.store_url}")
    if waiting:
        lines.append(f"  policyguard approvals show {waiting} --store {report.store_url}")
    lines.append(f"  policyguard audit {report.trace}")
    replay = "policyguard bench replay --domain airline   # the full offline replay"
    lines.append(f"  {checkout_install('tau2')} && {replay}")
    return lines


def _call_lines(call: CallReport) -> list[str]:
    word = OUTCOME_WORDS[call.outcome]
    lines = _field("call", f"{call.tool} {json.dumps(call.arguments)}")
    if call.outcome == "allow":
        how = f"the gate proved {call.gate_met} requirements, the scripted verifier judged {call.verifier_judged}"
    elif call.outcome == "block" and call.stage == "gate":
        how = "a deterministic check failed; no verifier was needed"
    elif call.outcome == "escalate":
        how = f"waiting in the approval queue for a person: {call.approval_id}"
    else:
        how = f"stage {call.stage}"
    lines += _field("outcome", f"{word} (stage: {call.stage}) - {how}")
    if call.executed:
        lines += _field("executed", "yes, with its grant; tau2's result: " + _result_summary(call.result))
    for failed in call.failed:
        tag = " (your company's extra rule, approvable)" if failed.company_rule else ""
        lines += _field("failed", f"{failed.id}{tag}: {failed.text}")
        if failed.check:
            lines += _field("check", " ".join(failed.check.split()))
        label = "rule" if failed.company_rule else "policy"
        lines += _field(label, f'"{failed.source}"')
    if call.message:
        lines += _field("agent gets", call.message)
    return lines


def _result_summary(result: object) -> str:
    if isinstance(result, dict) and "reservation_id" in result:
        refunds = [p for p in result.get("payment_history", []) if isinstance(p, dict) and p.get("amount", 0) < 0]
        refund = ", ".join(f"{p['amount']} to {p['payment_id']}" for p in refunds)
        return f"reservation {result['reservation_id']} status {result.get('status')}" + (
            f", refund {refund}" if refund else ""
        )
    return json.dumps(result)[:200]
