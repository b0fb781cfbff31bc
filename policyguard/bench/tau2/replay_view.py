"""The replay suite's report as a table a person can read, with a legend and a verdict.

**Verdict rule** (:func:`verdict`). A replay is *as expected* when

* every injected violation is blocked (no miss, also under each extra probe of
  ``--probe all``);
* every gold write the guard blocks is one of the domain's listed gold
  disagreements (gold that contradicts the written policy, explained in the
  table, e.g. airline tasks 29 and 33);
* tau2's own evaluator agrees on every scored task.

Gold that contradicts the written policy (reported apart) never changes the
verdict: a contradicting task may hold compliant writes too, so either outcome
is shown, not scored. Anything else is *NOT as expected*, and ``bench replay``
then exits 1.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from .probes import PROBES
from .replay import ReplayReport
from .replay_domains import disagreements

README = "benchmarks/tau2/README.md"

LEGEND = (
    "How to read this (details: " + README + ")",
    "  gold write       a write from tau2's reference solution of a task; the guard must let it pass",
    "  FALSE BLOCK      a gold write the guard blocked; listed gold disagreements (a note explains each) are expected",
    "  contradicting    gold that breaks the written policy as tau2 ships it; shown apart, never scored",
    "  injected         a policy violation built from the real database; the guard must block it (recall)",
    "  probe            an attack added to every violation (none = plain); A1.. are listed with --probe all",
    "  added reads      reads a careful agent makes before a write that the gold skips; the harness adds them",
)

_UPSTREAM_REF = re.compile(r"\s*\(tau2-bench issues? #\d+(?:, #\d+)*\)")

RECORDS = {  # what each domain's violations are built from, for the table's heading
    "airline": ("users and reservations", "db.json"),
    "retail": ("users, orders and products", "db.json"),
    "telecom": ("customers, lines and bills", "db.toml"),
}


def _plain(text: str) -> str:
    """``text`` without upstream issue numbers (the README cites them with links)."""
    return _UPSTREAM_REF.sub("", text)


class Verdict(BaseModel):
    """Whether a replay came out as the benchmark's README says it should."""

    model_config = ConfigDict(extra="forbid")

    as_expected: bool
    misses: int
    probe_misses: int
    unexpected_gold_blocks: list[str]
    listed_gold_blocks: list[str]
    evaluator_mismatches: int
    summary: str


def verdict(report: ReplayReport) -> Verdict:
    """Apply the verdict rule of this module to ``report``."""
    listed = disagreements(report.domain)
    blocked_tasks = list(dict.fromkeys(c.task_id for c in report.gold_blocked_calls))
    unexpected = [t for t in blocked_tasks if t not in listed]
    explained = [t for t in blocked_tasks if t in listed]
    misses = report.violations_total - report.violations_blocked
    probe_misses = sum(t.total - t.blocked for tallies in report.probe_results.values() for t in tallies.values())
    bad_rewards = sum(1 for c in report.evaluator_checks if not c.ok)
    ok = not (misses or probe_misses or unexpected or bad_rewards)
    if ok:
        parts = [f"every injected violation blocked ({report.violations_blocked}/{report.violations_total})"]
        if report.probe_results:
            parts.append("also under every probe")
        parts.append(
            "gold blocked only where it disagrees with the written policy (tasks " + ", ".join(explained) + ")"
            if explained
            else "no gold write blocked"
        )
        if report.evaluator_checks:
            parts.append(f"tau2's evaluator agreed on {len(report.evaluator_checks)}/{len(report.evaluator_checks)}")
        summary = "as expected - " + "; ".join(parts)
    else:
        problems = [f"{misses} miss(es)"] if misses else []
        if probe_misses:
            problems.append(f"{probe_misses} miss(es) under probes")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected gold block(s) (tasks {', '.join(unexpected)})")
        if bad_rewards:
            problems.append(f"{bad_rewards} evaluator mismatch(es)")
        summary = "NOT as expected - " + ", ".join(problems)
    return Verdict(
        as_expected=ok,
        misses=misses,
        probe_misses=probe_misses,
        unexpected_gold_blocks=unexpected,
        listed_gold_blocks=explained,
        evaluator_mismatches=bad_rewards,
        summary=summary,
    )


def _args(arguments: dict[str, Any], limit: int = 90) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:5.1f}%" if den else "   n/a"


def render(report: ReplayReport, command: str | None = None) -> str:
    """The whole report: legend, gold, contradicting gold, recall, misses, evaluator, runtime, verdict."""
    lines: list[str] = []
    probe = f"{report.probe} ({PROBES[report.probe]})" if report.probe else "none (no attack added)"
    lines.append(f"PolicyGuard replay suite - tau2 {report.domain}, config {report.config}, probe {probe}")
    lines.append(f"checklist: {report.checklist}")
    if command:
        lines.append(f"command:   {command}")
    lines.append("")
    lines.extend(LEGEND)
    lines.append("")

    lines.append(
        f"Gold writes (must pass): {report.gold_passed}/{report.gold_total} passed, "
        f"{report.gold_false_blocks} false block(s)  [{report.tasks} tasks]"
    )
    for call in report.gold_blocked_calls:
        lines.append(f"  FALSE BLOCK task {call.task_id}: {call.tool}({_args(call.arguments)})")
        lines.append(f"    {call.stage}: {(call.message or '').strip()[:320]}")
        if call.task_id in disagreements(report.domain):
            lines.append(f"    note (listed gold disagreement, expected): {disagreements(report.domain)[call.task_id]}")
    if report.config == "gate_only" and report.unverified_requirements:
        ids = ", ".join(report.unverified_requirements)
        lines.append(f"  gate_only: procedural requirements left UNVERIFIED (count as pass here): {ids}")
    reads = sum(len(v) for v in report.inserted_reads.values())
    lines.append(
        f"  added reads (made before gold writes: the policy needs them, the gold skips them): "
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
            outcome = "passed " if call.passed else "BLOCKED"
            lines.append(f"  task {call.task_id:>2} {outcome} {call.tool}({_args(call.arguments, 60)})")
        for task_id, reason in report.contradicting_reasons.items():
            lines.append(f"  task {task_id:>2}: {_plain(reason)}")
        lines.append("")

    records = RECORDS.get(report.domain, ("records", "its database"))
    lines.append(f"Injected violations (must block), built from real {records[0]} in {records[1]}")
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
    lines.append(f"verdict: {verdict(report).summary}")
    return "\n".join(lines)
