"""``policyguard bench sims RESULTS.json...``: would the guard have let real agents' writes through?

Replays tau2 results files (any agent's; no environment, no agent model) and
decides every write with the guard on the recorded dialogue before it. Gate-only
by default; ``--config hybrid`` adds a verifier model and checks its key first.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys


def register(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sims = bench_subparsers.add_parser(
        "sims",
        help="replay real tau2 runs (results files): which real writes would the guard block?",
        description=(
            "For every write an agent made in the given tau2 results files, decides it with the guard on exactly "
            "the dialogue before it (tool results as recorded, never re-executed) and labels it gold (matches a "
            "gold action), extra (not gold, reward 1) or non_gold (not gold, failed simulation). non_gold is not "
            "the same as a policy violation; --labels gives true per-call labels. Prints the share of compliant writes "
            "blocked twice: raw (every gold/extra write) and settled (gold matched one to one; writes the environment "
            "refused, repeats and writes on tasks whose gold contradicts the policy set apart and listed). No model "
            "is needed for gate_only."
        ),
    )
    sims.add_argument(
        "results",
        nargs="+",
        help="tau2 results files (tau2.data_model.simulation.Results JSON) or 'bench tau2' output folders",
    )
    sims.add_argument(
        "--domain",
        required=True,
        help="tau2 domain of the results: any domain the installed tau2 provides that has a checklist "
        "(airline, retail, telecom)",
    )
    sims.add_argument(
        "--config",
        default="gate_only",
        choices=["gate_only", "hybrid"],
        help="gate_only = the deterministic gate alone (default, no model); hybrid = gate + verifier",
    )
    sims.add_argument("--checklist", default=None, help="checklist YAML (default: the shipped one for the domain)")
    sims.add_argument("--verifier-model", default=None, help="verifier for --config hybrid, e.g. openai/gpt-4.1")
    sims.add_argument(
        "--labels",
        default=None,
        help='per-call labels JSON: {"labels": [{"simulation": ID, "call_id": ID or "turn": N, "violation": true}]}',
    )
    sims.add_argument(
        "--no-fetch",
        action="store_true",
        help="the guard makes no reads itself (by default it reads what a check lacks through the environment's "
        "read tools, on the database as it stood just before each write)",
    )
    sims.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    sims.set_defaults(func=_sims)


def _sims(args: argparse.Namespace) -> int:
    from policyguard.errors import ConfigError

    if args.config == "hybrid":
        if not args.verifier_model:
            raise ConfigError("--config hybrid needs --verifier-model (e.g. openai/gpt-4.1 or scripted:FILE.json)")
        from policyguard.bench.tau2.runner import missing_keys

        keys = missing_keys(args.verifier_model)
        if keys:
            raise ConfigError(
                f"missing API key: --verifier-model {args.verifier_model} needs {', '.join(keys)}; "
                "set it and run again (--config hybrid calls the verifier model)"
            )
    from policyguard.bench.tau2.domain import quiet_tau2_logs

    quiet_tau2_logs()
    from policyguard.bench.tau2.domain import DomainData
    from policyguard.bench.tau2.guarding import build_guard
    from policyguard.bench.tau2.sims import SimsReplay, load_label_file, load_source, render
    from policyguard.checklist.schema import load_checklist
    from policyguard.resources import shipped_checklist
    from policyguard.verifier.models import resolve_model

    labels = load_label_file(args.labels) if args.labels else None
    checklist_path = args.checklist or shipped_checklist(args.domain)
    checklist = load_checklist(checklist_path)
    sources = [load_source(path, args.domain) for path in args.results]
    data = DomainData.load(args.domain)
    model = resolve_model(args.verifier_model) if args.config == "hybrid" else None
    guard = build_guard(args.config, checklist, data.policy_text, verifier_model=model)
    assert guard is not None
    replay = SimsReplay(
        args.domain,
        checklist,
        guard,
        config=args.config,
        tasks=data.tasks,
        checklist_name=str(checklist_path),
        labels=labels,
        fetch_from=None if args.no_fetch else data,
    )
    report = replay.run(args.results, sources)
    if args.json:
        print(json.dumps(report.summary(), indent=2))
    else:
        command = "policyguard " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
        print(render(report, command))
    return 0
