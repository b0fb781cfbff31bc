"""``policyguard bench replay|tau2|report``: experiments on the real tau2 benchmark.

* ``bench replay`` - the offline replay suite: gold writes must pass, injected
  violations must block, no model needed. It ends with a verdict
  (:func:`policyguard.bench.tau2.replay_view.verdict`): exit 0 when the result is as
  expected, 1 when not (a miss, a gold block that is not a listed disagreement,
  an evaluator mismatch); ``--fail-on-miss`` also exits 1 on listed gold
  disagreements (any false block at all);
* ``bench tau2`` - agent + user simulations under one guard configuration,
  with checkpoints and resume (needs model keys);
* ``bench report DIR`` - metrics, markdown and PNG plots of ``bench tau2`` runs.

tau2 is the optional extra ``policyguard[tau2]``; it is imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from policyguard.trajectory import strictjson

DOMAIN_HELP = (
    "tau2 domain: any domain the installed tau2 provides that has a checklist in checklists/ "
    "(airline, retail, telecom); default airline"
)


def register(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from policyguard.bench.tau2.guarding import CONFIGS

    replay = bench_subparsers.add_parser(
        "replay",
        help="offline replay suite on a tau2 domain: gold writes must pass, injected violations must block",
        description=(
            "Replays every task's gold actions on a fresh tau2 environment and sends each gold write "
            "through the guard (it must pass), then attempts generated policy violations built from the real "
            "database (each must be blocked), and scores gold + an injected violation with tau2's own evaluator. "
            "No model is needed for gate_only. The output ends with a verdict; exit 0 when the result is as "
            "expected (every violation blocked; gold blocked only where it is a listed disagreement with the "
            "written policy; tau2's evaluator agrees), 1 when not. How to read it: benchmarks/tau2/README.md."
        ),
    )
    replay.add_argument("--domain", default="airline", help=DOMAIN_HELP)
    replay.add_argument(
        "--config",
        default="gate_only",
        choices=["gate_only", "hybrid", "args_only"],
        help="guard configuration: gate_only = the deterministic gate alone (no model); args_only = the gate "
        "with only the checks over call arguments; hybrid = gate + verifier (checklist mode)",
    )
    replay.add_argument("--checklist", default=None, help="checklist YAML (default: the shipped one for the domain)")
    replay.add_argument("--verifier-model", default=None, help="verifier for --config hybrid, e.g. scripted:FILE.json")
    replay.add_argument(
        "--probe",
        default=None,
        choices=["A1", "A2", "A3", "A1F", "A2F", "A3F", "all"],
        help="adversarial probe on the violations; 'all' reports recall without and under each probe",
    )
    replay.add_argument("--per-class", type=int, default=12, help="violation cases per class (default 12)")
    replay.add_argument(
        "--evaluate",
        default=None,
        help="tasks scored by tau2's evaluator: sample (every 10th), all, none, or ids like 3,7,20 "
        "(default sample; none for a domain with no evaluator violation, such as telecom)",
    )
    replay.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    replay.add_argument(
        "--fail-on-miss",
        action="store_true",
        help="stricter exit: 1 also on the listed gold disagreements (any false block at all)",
    )
    replay.set_defaults(func=_replay)

    run = bench_subparsers.add_parser(
        "tau2",
        help="run tau2 simulations (agent + simulated user) under one guard configuration",
        description=(
            "Runs every task of the split --trials times with the chosen configuration; one JSON file per "
            "finished simulation under --output/sims (a crash resumes with --resume; nothing finished is re-run), "
            "summary.json at the end. Needs provider keys for the agent, user and verifier models."
        ),
    )
    run.add_argument("--domain", default="airline", help=DOMAIN_HELP)
    run.add_argument(
        "--config",
        required=True,
        choices=list(CONFIGS),
        help="guard configuration: baseline = no guard; gate_only = the deterministic gate alone; args_only = "
        "the gate with only the checks over call arguments; hybrid = gate + verifier (checklist mode); "
        "pg_checklist, pg_raw, pg_raw_traj, pg_checklist_only = the verifier alone in that mode "
        "(see 'policyguard verify --help', --mode)",
    )
    run.add_argument("--agent-model", required=True, help="LiteLLM model for the agent, e.g. openai/gpt-4.1")
    run.add_argument("--user-model", required=True, help="LiteLLM model for the simulated user")
    run.add_argument(
        "--verifier-model",
        default=None,
        help="verifier model spec for configs that use a verifier: a LiteLLM name, openai-sdk:MODEL, "
        "anthropic-sdk:MODEL or scripted:FILE.json",
    )
    run.add_argument("--checklist", default=None, help="checklist YAML (default: the shipped one for the domain)")
    run.add_argument("--trials", type=int, default=4, help="simulations per task (default 4; pass^k needs k <= trials)")
    run.add_argument(
        "--split",
        default="base",
        help="tau2's task split, as listed in the domain's split_tasks.json, e.g. base, train, test "
        "(telecom also small, full); default base",
    )
    run.add_argument("--tasks", default=None, help="comma-separated task ids (default: the whole split)")
    run.add_argument("--concurrency", type=int, default=4, help="simulations run at the same time (default 4)")
    run.add_argument(
        "--max-steps",
        type=int,
        default=100,
        help="tau2's step limit for one simulation, about one step per agent, user or tool message (default 100)",
    )
    run.add_argument("--output", required=True, help="output directory")
    run.add_argument("--resume", action="store_true", help="continue a run in --output, skipping finished sims")
    run.add_argument("--agent-llm-args", default=None, help='JSON for the agent model (default {"temperature": 0.0})')
    run.add_argument("--user-llm-args", default=None, help='JSON for the user model (default {"temperature": 0.0})')
    run.set_defaults(func=_tau2)

    report = bench_subparsers.add_parser(
        "report", help="metrics, markdown and PNG plots for one or more 'bench tau2' output directories"
    )
    report.add_argument("dirs", nargs="+", help="directories written by 'policyguard bench tau2'")
    report.add_argument("--output", default=None, help="where report.md and the plots go (default: the first DIR)")
    report.add_argument(
        "--labels",
        default=None,
        help="PV/Mut task labels JSON (default: the shipped benchmarks/tau2/<domain>_labels.json)",
    )
    report.add_argument("--no-plots", action="store_true", help="skip the PNG plots (no matplotlib needed)")
    report.add_argument(
        "--sims", nargs="+", default=None, help="also replay these tau2 results files gate-only (the bench sims table)"
    )
    report.add_argument("--sims-checklist", default=None, help="checklist for --sims (default: the shipped one)")
    report.add_argument("--json", action="store_true", help="print the metrics as JSON")
    report.set_defaults(func=_report)


def _replay(args: argparse.Namespace) -> int:
    from policyguard.bench.tau2.domain import quiet_tau2_logs

    quiet_tau2_logs()
    from policyguard.bench.tau2.domain import DomainData
    from policyguard.bench.tau2.guarding import build_guard
    from policyguard.bench.tau2.replay import ReplaySuite, sample_tasks
    from policyguard.bench.tau2.replay_domains import replay_domain
    from policyguard.bench.tau2.replay_view import render, verdict
    from policyguard.checklist.schema import load_checklist
    from policyguard.errors import ConfigError
    from policyguard.resources import shipped_checklist
    from policyguard.verifier.models import resolve_model

    data = DomainData.load(args.domain)
    checklist = load_checklist(args.checklist or shipped_checklist(args.domain))
    suite_domain = replay_domain(data)
    evaluate = args.evaluate or ("sample" if suite_domain.evaluator_classes else "none")
    if evaluate != "none" and not suite_domain.evaluator_classes:
        raise ConfigError(f"--evaluate: the {args.domain} replay has no violation for tau2's evaluator; pass none")
    model = None
    if args.config == "hybrid":
        if not args.verifier_model:
            raise ConfigError("--config hybrid needs --verifier-model (e.g. scripted:FILE.json)")
        model = resolve_model(args.verifier_model)
    guard = build_guard(args.config, checklist, data.policy_text, verifier_model=model)
    assert guard is not None
    probe = None if args.probe == "all" else args.probe
    extra = ("A1", "A2", "A3", "A1F", "A2F", "A3F") if args.probe == "all" else ()
    suite = ReplaySuite(data, checklist, guard, config=args.config, probe=probe)
    report = suite.run(per_class=args.per_class, evaluate_tasks=sample_tasks(data, evaluate), extra_probes=extra)
    result = verdict(report)
    if args.json:
        payload = report.model_dump(mode="json")
        payload["recall"] = round(report.recall, 4)
        payload["verdict"] = result.model_dump(mode="json")
        print(json.dumps(payload, indent=2))
    else:
        command = "policyguard " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
        print(render(report, command))
    if not result.as_expected:
        return 1
    return 1 if (args.fail_on_miss and report.gold_false_blocks) else 0


def _tau2(args: argparse.Namespace) -> int:
    from policyguard.bench.tau2.domain import quiet_tau2_logs

    quiet_tau2_logs()
    from policyguard.bench.tau2.runner import RunSpec, run_benchmark
    from policyguard.errors import ConfigError

    extra: dict[str, dict[str, object]] = {}
    for name in ("agent_llm_args", "user_llm_args"):
        raw = getattr(args, name)
        if raw is not None:
            try:
                value = strictjson.loads(raw)
            except ValueError as exc:
                raise ConfigError(f"--{name.replace('_', '-')}: not JSON: {exc}") from exc
            if not isinstance(value, dict):
                raise ConfigError(f"--{name.replace('_', '-')}: must be a JSON object")
            extra[name] = value
    spec = RunSpec(
        **extra,  # type: ignore[arg-type]
        domain=args.domain,
        config=args.config,
        agent_model=args.agent_model,
        user_model=args.user_model,
        verifier_model=args.verifier_model,
        checklist=args.checklist,
        trials=args.trials,
        split=args.split,
        tasks=[t.strip() for t in args.tasks.split(",")] if args.tasks else None,
        concurrency=args.concurrency,
        max_steps=args.max_steps,
    )
    summary = run_benchmark(spec, args.output, resume=args.resume)
    print(json.dumps(summary, indent=2))
    return 0


def _report(args: argparse.Namespace) -> int:
    from policyguard.bench.tau2.report import write_report

    out = write_report(
        args.dirs,
        output=args.output,
        labels_path=args.labels,
        plots=not args.no_plots,
        sims=args.sims,
        sims_checklist=args.sims_checklist,
    )
    if args.json:
        print(json.dumps(out.metrics, indent=2))
    else:
        print(out.markdown)
        print(f"\nwritten: {', '.join(str(p) for p in out.files)}", file=sys.stderr)
    return 0
