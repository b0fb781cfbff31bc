"""``bench sims`` as a table a person can read, and as markdown for ``bench report``."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..domains.airline.labels import POLICY_CONTRADICTING_GOLD
from .metric import RAW_RULE, SET_APART, SETTLED_RULE
from .model import BLOCK_CLASSES, GOLD_RULE, LABELS, NON_GOLD_NOTE, Label, SimCall, SimsReport
from .replay import task_order

# -- the human view --------------------------------------------------------------


def _args(arguments: dict[str, Any], limit: int = 100) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(call: SimCall) -> str:
    trial = "" if call.trial is None else f" trial {call.trial}"
    return f"{call.file} task {call.task}{trial} turn {call.turn}"


def label_rows(report: SimsReport) -> list[tuple[Label, int, int, str]]:
    """(label, writes, blocked, note) for every label present (gold, extra and non_gold always)."""
    rows = []
    for label in LABELS:
        writes = report.count(label)
        if writes == 0 and label not in ("gold", "extra", "non_gold"):
            continue
        blocked = report.count(label, blocked=True)
        note = ""
        if label in ("gold", "contradicting_gold") and blocked:
            note = f"{report.count(label, blocked=True, kind='read_first')} read-first, "
            note += f"{report.count(label, blocked=True, kind='hard')} hard"
        rows.append((label, writes, blocked, note))
    return rows


_APART_TITLES = {
    "excluded_task": "on a task whose gold contradicts the policy",
    "env_refused": "refused by the environment (error result recorded)",
    "repeat": "ran before in the simulation (gold one to one)",
}


def _rate(figures: dict[str, Any]) -> str:
    share = "" if figures["blocked_share"] is None else f" ({figures['blocked_share']:.1%})"
    return (
        f"{figures['blocked']} of {figures['writes']} blocked{share}: "
        f"{figures['blocked_hard']} hard, {figures['blocked_read_first']} read first"
    )


def rates_lines(report: SimsReport) -> list[str]:
    """The raw and settled rates, what was set apart, and the excluded tasks with their policy sentence."""
    rates = report.rates()
    lines = ["Compliant writes the guard blocks (its cost on these runs)"]
    lines.append(f"  raw:     {_rate(rates['raw'])}")
    lines.append(f"  settled: {_rate(rates['settled'])}")
    lines.append(f"  {RAW_RULE}; {SETTLED_RULE}.")
    lines.append("  set apart from the settled rate (raw writes):")
    for reason in SET_APART:
        lines.append(f"    {reason:<13} {_rate(rates['set_apart'][reason])}  - {_APART_TITLES[reason]}")
    if report.retasked:
        lines.append(
            f"  {report.retasked} simulation(s) recorded under another task id than the task tau2 evaluated them "
            "against: gold and exclusions use the evaluated task (from the reward's action checks)"
        )
    if rates["excluded_tasks"]:
        lines.append("  excluded tasks (every write of the task is out of the settled rate):")
    for row in rates["excluded_tasks"]:
        lines.append(
            f"    task {row['task']}: {row['simulations']} simulation(s), {row['writes']} write(s), "
            f"{row['blocked']} blocked"
        )
        lines.append(f'      policy: "{row["sentence"]}"')
        lines.append(f"      gold:   {row['why']}")
    return lines


def class_table(report: SimsReport) -> list[str]:
    """Blocked compliant writes (gold, extra, labelled compliant) by class of block."""
    compliant = [c for c in report.calls if c.compliant]
    blocked = sum(c.blocked for c in compliant)
    share = f" ({blocked / len(compliant):.1%})" if compliant else ""
    lines = [f"Blocked compliant writes: {blocked} of {len(compliant)}{share}, by class"]
    rows = report.compliant_by_class()
    if not rows:
        lines.append("  none")
    for name, row in rows.items():
        lines.append(
            f"  {name:<15} {row['blocked']:>4}  (hard {row['hard']}; the run's own tool refused "
            f"{row['refused_by_tool']} of them too)  {BLOCK_CLASSES.get(name, '')}"
        )
    return lines


def render(report: SimsReport, command: str | None = None) -> str:
    lines = [f"PolicyGuard on real agent runs - tau2 {report.domain}, config {report.config}"]
    lines.append(f"checklist: {report.checklist}")
    if command:
        lines.append(f"command:   {command}")
    lines.append(
        f"{report.simulations} simulations ({report.rewarded} with reward 1) in {len(report.files)} file(s); "
        f"every write decided on the recorded dialogue before it, nothing re-executed"
    )
    if report.skipped:
        lines.append(f"skipped: {report.skipped} simulation(s) without a recorded dialogue (infrastructure errors)")
    lines.append("")
    lines += rates_lines(report)
    lines.append("")
    width = max(len(label) for label in LABELS)
    lines.append(f"  {'label':<{width}}  writes  blocked")
    for label, writes, blocked, note in label_rows(report):
        row = f"  {label:<{width}}  {writes:>6}  {blocked:>7}"
        lines.append(f"{row}  ({note})" if note else row)
    total_blocked = sum(1 for c in report.calls if c.blocked)
    lines.append(f"  {'total':<{width}}  {len(report.calls):>6}  {total_blocked:>7}")
    lines.append(f"  {GOLD_RULE}.")
    lines.append(f"  {NON_GOLD_NOTE}.")
    lines.append("")
    lines += class_table(report)
    if report.tasks_without_gold:
        lines.append(
            f"  tasks with no gold actions found (all their writes are extra/non_gold): {report.tasks_without_gold}"
        )
    lines.append("")

    by_req = report.by_requirement()
    lines.append("Requirements that blocked (blocked writes in which each was NOT_MET, by label)")
    if not by_req:
        lines.append("  none")
    for rid, n in by_req.items():
        per = Counter(c.label for c in report.calls if c.blocked and rid in (c.not_met or [f"<{c.stage}>"]))
        detail = ", ".join(f"{label} {per[label]}" for label in LABELS if per[label])
        lines.append(f"  {rid}: {n}  ({detail})")
    lines.append("")

    for label, title in (("gold", "Blocked gold writes"), ("contradicting_gold", "Blocked contradicting gold")):
        stopped = [c for c in report.calls if c.label == label and c.blocked]
        if label == "contradicting_gold" and not stopped:
            continue
        head = "the guard's cost on these runs" if label == "gold" else "gold that contradicts the written policy"
        lines.append(f"{title} ({head}): {len(stopped)}")
        for kind, what in (
            ("read_first", "read first - a remediation the agent could follow (make the read, retry)"),
            ("hard", "hard refusals"),
        ):
            group = [c for c in stopped if c.block_kind == kind]
            if not group:
                continue
            lines.append(f"  {what}: {len(group)}")
            for call in group:
                lines.append(f"    {_where(call)}: {call.tool}({_args(call.arguments)})")
                lines.append(f"      not met: {', '.join(call.not_met) or call.stage}")
                lines.append(f"      remediation: {(call.message or '').strip()[:400]}")
        if label == "contradicting_gold":
            for task in sorted({c.task for c in stopped}, key=task_order):
                lines.append(f"  task {task}: {POLICY_CONTRADICTING_GOLD.get(task, '')}")
        lines.append("")
    lines.append(f"replay time: {report.runtime_s:.1f} s (guard decisions; loading the files not included)")
    return "\n".join(lines)


def markdown_table(report: SimsReport) -> str:
    """The per-label table and the blocking requirements as markdown (for ``bench report``)."""
    out = ["## Real agent runs replayed through the guard (bench sims)", ""]
    out.append(
        f"{report.simulations} simulations ({report.rewarded} with reward 1), config {report.config}, "
        f"checklist {report.checklist}. {NON_GOLD_NOTE}."
    )
    out.append("")
    rates = report.rates()
    out.append("| compliant writes | writes | blocked | hard | read first |")
    out.append("|---|---|---|---|---|")
    for name in ("raw", "settled"):
        row = rates[name]
        out.append(
            f"| {name} | {row['writes']} | {row['blocked']} | {row['blocked_hard']} | {row['blocked_read_first']} |"
        )
    for reason in SET_APART:
        row = rates["set_apart"][reason]
        out.append(
            f"| apart: {reason} | {row['writes']} | {row['blocked']} | {row['blocked_hard']} | "
            f"{row['blocked_read_first']} |"
        )
    excluded = ", ".join(row["task"] for row in rates["excluded_tasks"])
    out.append("")
    out.append(f"{SETTLED_RULE}." + (f" Excluded tasks met: {excluded}." if excluded else ""))
    out.append("")
    out.append("| label | writes | blocked | note |")
    out.append("|---|---|---|---|")
    for label, writes, blocked, note in label_rows(report):
        out.append(f"| {label} | {writes} | {blocked} | {note} |")
    out.append("")
    by_req = report.by_requirement()
    if by_req:
        out.append("| requirement (NOT_MET in blocked writes) | writes |")
        out.append("|---|---|")
        out += [f"| {rid} | {n} |" for rid, n in by_req.items()]
        out.append("")
    return "\n".join(out)
