"""``policyguard bench report DIR...``: markdown tables and PNG plots of ``bench tau2`` runs.

``--sims PATH...`` appends the ``bench sims`` table (gate only) for real runs.

matplotlib (Agg backend) is imported only when plots are drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policyguard.errors import ConfigError

from .labels import CALL_TRUTH_RULE, LABEL_RULE, Label, default_labels_path, gold_write_keys, load_labels
from .metrics import ConfigMetrics, compute_metrics
from .results import SimResult
from .runner import SPEC_FILE, RunSpec, load_results
from .sims import markdown_table


@dataclass
class ReportOutput:
    markdown: str
    metrics: dict[str, Any]
    files: list[Path] = field(default_factory=list)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def task_truth(domain: str, labels_path: str | Path | None) -> tuple[dict[str, Label], dict[str, set[str]], str]:
    """PV/Mut labels (from the data file) and each task's gold write keys (from tau2's tasks)."""
    from .domain import DomainData
    from .labels import compute_labels

    data = DomainData.load(domain)
    path = Path(labels_path) if labels_path else default_labels_path(domain)
    if path.is_file():
        labels = load_labels(path).labels
        source = str(path)
    elif labels_path:
        raise ConfigError(f"labels file not found: {path}")
    else:
        labels = compute_labels(data.tasks, data.write_tools)
        source = "computed by the rule (no labels file found)"
    gold = {t.id: gold_write_keys(t, data.write_tools) for t in data.tasks}
    return labels, gold, source


def _load_dir(folder: Path) -> tuple[RunSpec, list[SimResult]]:
    spec_path = folder / SPEC_FILE
    if not spec_path.is_file():
        raise ConfigError(f"{folder}: no {SPEC_FILE} (not a 'bench tau2' output directory)")
    spec = RunSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
    return spec, load_results(folder)


def render_markdown(rows: list[tuple[RunSpec, ConfigMetrics]], labels_source: str) -> str:
    k_max = max((max(m.pass_hat_k) for _, m in rows if m.pass_hat_k), default=1)
    ks = list(range(1, k_max + 1))
    out = ["# PolicyGuard on tau2", ""]
    domains = sorted({s.domain for s, _ in rows})
    out.append(f"Domain(s): {', '.join(domains)}. Labels: {labels_source}.")
    out.append(f"- Task labels: {LABEL_RULE}")
    out.append(f"- Per-call ground truth: {CALL_TRUTH_RULE}")
    out.append("- pass^k = mean over tasks of comb(c,k)/comb(n,k); infra-error runs excluded and counted.")
    out.append("")
    out.append("## pass^k")
    head = ["config", "agent", "sims", "infra"] + [f"pass^{k}" for k in ks] + [f"PV pass^{k_max}", f"Mut pass^{k_max}"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for spec, m in rows:
        cells = [spec.config, spec.agent_model, str(m.simulations), str(m.infra_errors)]
        cells += [_fmt(m.pass_hat_k.get(k)) for k in ks]
        cells += [_fmt(m.pass_hat_k_pv.get(k_max)), _fmt(m.pass_hat_k_mut.get(k_max))]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("## Verdict view (every attempted mutating call)")
    head = ["config", "attempts", "TP", "FP", "FN", "TN", "block rate", "recall", "PV recall"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for spec, m in rows:
        v = m.verdict
        pv = f"{m.pv_blocked}/{m.pv_attempts}" if m.pv_attempts else "-"
        cells = [spec.config, str(v.attempts), str(v.tp), str(v.fp), str(v.fn), str(v.tn)]
        cells += [_fmt(m.block_rate), _fmt(v.recall), pv]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("## Runtime view, trajectories and cost")
    head = [
        "config",
        "executed writes",
        "violating",
        "Call-NMR",
        "remediation turns/block",
        "unresolved blocks",
        "messages",
        "agent+user turns",
        "cost agent",
        "cost user",
        "cost verifier",
        "verifier latency p50/p95 s",
    ]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for spec, m in rows:
        lat = m.verifier_latency_s
        cells = [
            spec.config,
            str(m.executed_mutating),
            str(m.executed_violating),
            _fmt(m.call_nmr),
            _fmt(m.remediation_turns_per_block, 2),
            str(m.unresolved_blocks),
            _fmt(m.mean_messages, 1),
            _fmt(m.mean_agent_user_turns, 1),
            _money(m.cost_per_trial["agent"]),
            _money(m.cost_per_trial["user"]),
            _money(m.cost_per_trial["verifier"]),
            f"{_fmt(lat['p50'], 2)}/{_fmt(lat['p95'], 2)}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def plot(rows: list[tuple[RunSpec, ConfigMetrics]], folder: Path) -> list[Path]:
    """``passk.png`` (pass^k curves: all, PV, Mut) and ``confusion.png`` (verdict-view bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    panels = [("all tasks", "pass_hat_k"), ("PV", "pass_hat_k_pv"), ("Mut", "pass_hat_k_mut")]
    for ax, (title, attr) in zip(axes, panels, strict=True):
        for spec, m in rows:
            curve: dict[int, float] = getattr(m, attr)
            if curve:
                ax.plot(list(curve), list(curve.values()), marker="o", label=spec.config)
        ax.set_title(f"pass^k - {title}")
        ax.set_xlabel("k")
        ax.set_xticks(range(1, max((max(m.pass_hat_k) for _, m in rows if m.pass_hat_k), default=1) + 1))
        ax.set_ylim(0, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("pass^k")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = folder / "passk.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    files.append(path)

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    parts = ["tp", "fp", "fn", "tn"]
    width = 0.8 / len(parts)
    for i, part in enumerate(parts):
        xs = [j + i * width for j in range(len(rows))]
        ax.bar(xs, [getattr(m.verdict, part) for _, m in rows], width=width, label=part.upper())
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([s.config for s, _ in rows], rotation=20)
    ax.set_ylabel("attempted mutating calls")
    ax.set_title("verdict view: blocked/allowed x violating/compliant")
    ax.legend()
    fig.tight_layout()
    path = folder / "confusion.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    files.append(path)
    return files


def sims_section(domain: str, paths: list[str], checklist_path: str | None = None) -> tuple[str, dict[str, Any]]:
    """``bench sims`` (gate only) on ``paths``: its markdown table and its summary without the per-call list."""
    from policyguard.checklist.schema import load_checklist
    from policyguard.resources import shipped_checklist

    from .domain import DomainData
    from .guarding import build_guard
    from .sims import replay_results

    path = checklist_path or shipped_checklist(domain)
    checklist = load_checklist(path)
    guard = build_guard("gate_only", checklist, DomainData.load(domain).policy_text)
    assert guard is not None
    report = replay_results(
        paths, domain=domain, checklist=checklist, guard=guard, config="gate_only", checklist_name=str(path)
    )
    summary = {k: v for k, v in report.summary().items() if k != "calls"}
    return markdown_table(report), {"files": paths, **summary}


def write_report(
    dirs: list[str],
    *,
    output: str | None = None,
    labels_path: str | None = None,
    plots: bool = True,
    sims: list[str] | None = None,
    sims_checklist: str | None = None,
) -> ReportOutput:
    loaded = [_load_dir(Path(d)) for d in dirs]
    domains = {spec.domain for spec, _ in loaded}
    if len(domains) != 1:
        raise ConfigError(f"runs of different domains cannot share one report: {sorted(domains)}")
    labels, gold, source = task_truth(next(iter(domains)), labels_path)
    rows = [(spec, compute_metrics(results, labels, gold)) for spec, results in loaded]
    markdown = render_markdown(rows, source)
    sims_summary: dict[str, Any] | None = None
    if sims:
        table, sims_summary = sims_section(next(iter(domains)), sims, sims_checklist)
        markdown = markdown + "\n" + table
    folder = Path(output or dirs[0])
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / "report.md", folder / "metrics.json"]
    (folder / "report.md").write_text(markdown + "\n", encoding="utf-8")
    metrics = {f"{spec.config}@{d}": m.model_dump(mode="json") for d, (spec, m) in zip(dirs, rows, strict=True)}
    if sims_summary is not None:
        metrics["bench_sims"] = sims_summary
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    if plots:
        files += plot(rows, folder)
    return ReportOutput(markdown=markdown, metrics=metrics, files=files)
