"""The replay suite's report as a table a person can read."""

from __future__ import annotations

import json
from typing import Any

from .probes import PROBES
from .replay import ReplayReport
from .replay_domains import disagreements


def _args(arguments: dict[str, Any], limit: int = 90) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:5.1f}%" if den else "   n/a"


def render(report: ReplayReport, command: str | None = None) -> str:
    """The whole report: gold, contradicting gold, per-class recall, misses, evaluator, runtime."""
    lines: list[str] = []
    probe = f"{report.probe} ({PROBES[report.probe]})" if report.probe else "none"
    lines.append(f"PolicyGuard replay suite - tau2 {report.domain}, config {report.config}, probe {probe}")
    lines.append(f"checklist: {report.checklist}")
    if command:
        lines.append(f"command:   {command}")
    lines.append("")

    lines.append(
        f"Gold writes (must pass): {report.gold_passed}/{report.gold_total} passed, "
        f"{report.gold_false_blocks} false block(s)  [{report.tasks} tasks]"
    )
    for call in report.gold_blocked_calls:
        lines.append(f"  FALSE BLOCK task {call.task_id}: {call.tool}({_args(call.arguments)})")
        lines.append(f"    {call.stage}: {(call.message or '').strip()[:320]}")
        if call.task_id in disagreements(report.domain):
            lines.append(f"    note: {disagreements(report.domain)[call.task_id]}")
    if report.config == "gate_only" and report.unverified_requirements:
        ids = ", ".join(report.unverified_requirements)
        lines.append(f"  gate_only: procedural requirements left UNVERIFIED (count as pass here): {ids}")
    reads = sum(len(v) for v in report.inserted_reads.values())
    lines.append(
        f"  reads the harness added before gold writes (the policy needs them, the gold omits them): "
        f"{reads} in {len(report.inserted_reads)} tasks (--json lists them)"
    )
    lines.append("")

    if report.contradicting_gold or report.contradicting_reasons:
        blocked = sum(1 for c in report.contradicting_gold if not c.passed)
        lines.append(
            f"Gold that contradicts the written policy (reported apart, rules not bent): "
            f"{blocked}/{len(report.contradicting_gold)} writes blocked"
        )
        for call in report.contradicting_gold:
            verdict = "passed " if call.passed else "BLOCKED"
            lines.append(f"  task {call.task_id:>2} {verdict} {call.tool}({_args(call.arguments, 60)})")
        for task_id, reason in report.contradicting_reasons.items():
            lines.append(f"  task {task_id:>2}: {reason}")
        lines.append("")

    records = "users, orders and products" if report.domain == "retail" else "users and reservations"
    lines.append(f"Injected violations (must block), built from real {records} in db.json")
    width = max(len(c) for c in [*report.by_class, *report.not_expressible, "TOTAL"])
    lines.append(f"  {'class':<{width}}  cases  blocked  recall  blocked by (requirement NOT_MET: cases)")
    for cls, tally in report.by_class.items():
        ranked = sorted(tally.blocked_by.items(), key=lambda kv: -kv[1])
        reasons = ", ".join(f"{rid}: {n}" for rid, n in ranked[:3]) + (
            f", +{len(ranked) - 3} more" if len(ranked) > 3 else ""
        )
        row = f"  {cls:<{width}}  {tally.total:>5}  {tally.blocked:>7}  {_pct(tally.blocked, tally.total)}"
        lines.append(f"{row}  {reasons}".rstrip())
    for cls, why in report.not_expressible.items():
        lines.append(f"  {cls:<{width}}      -        -     n/a  ({why})")
    lines.append(
        f"  {'TOTAL':<{width}}  {report.violations_total:>5}  {report.violations_blocked:>7}  "
        f"{_pct(report.violations_blocked, report.violations_total)}"
    )
    if report.misses:
        lines.append(f"  misses ({len(report.misses)}):")
        for miss in report.misses:
            lines.append(f"    {miss.case_id}: {miss.tool}({_args(miss.arguments, 80)}) -> {miss.outcome}")
    lines.append("")

    if report.probe_results:
        names = list(report.probe_results)
        lines.append("Adversarial probes on the same violations (blocked/cases per class)")
        lines.append(f"  {'class':<{width}}  {'none':>7}  " + "  ".join(f"{n:>7}" for n in names))
        for cls, tally in report.by_class.items():
            tallies = [tally] + [report.probe_results[n][cls] for n in names]
            lines.append(f"  {cls:<{width}}  " + "  ".join(f"{t.blocked}/{t.total}".rjust(7) for t in tallies))
        totals = []
        for n in names:
            blocked = sum(t.blocked for t in report.probe_results[n].values())
            total = sum(t.total for t in report.probe_results[n].values())
            totals.append(f"{n} ({PROBES[n]}): {_pct(blocked, total).strip()}")
        lines.append(
            f"  recall: none {_pct(report.violations_blocked, report.violations_total).strip()}; " + "; ".join(totals)
        )
        lines.append("")

    if report.evaluator_checks:
        ok = sum(1 for c in report.evaluator_checks if c.ok)
        total = len(report.evaluator_checks)
        lines.append(
            f"tau2's own evaluator, gold + one injected violation: {ok}/{total} tasks as expected "
            "(blocked and removed -> reward 1, executed -> reward 0)"
        )
        for check in report.evaluator_checks:
            mark = "ok " if check.ok else "BAD"
            lines.append(
                f"  {mark} task {check.task_id:>2} {check.violation}: blocked={check.blocked_by_guard} "
                f"reward(blocked)={check.reward_gold_plus_blocked:g} "
                f"reward(executed)={check.reward_gold_plus_executed:g}"
            )
        lines.append("")
    lines.append(f"runtime: {report.runtime_s:.1f} s")
    return "\n".join(lines)
