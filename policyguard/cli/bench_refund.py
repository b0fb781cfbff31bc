"""``policyguard bench refund`` and ``policyguard bench inspect``: the refund-agent eval."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _default_eval() -> Path:
    """The shipped refund eval (the checkout's ``benchmarks/refund`` or the wheel's copy)."""
    from policyguard.resources import benchmark_file

    return benchmark_file("refund", "eval.yaml")


def register(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = bench_subparsers.add_parser(
        "refund",
        help="run the refund-agent eval against the buggy or the fixed target",
        description=(
            "Runs every sample of the refund eval, scores decision, tool arguments and the final ledger, "
            "and applies the release gate. Exit 0 passed, 1 failed (e.g. any unauthorized refund), "
            "2 bad input, 3 inconclusive (the ledger or the --store could not be read)."
        ),
    )
    run.add_argument(
        "--target",
        required=True,
        choices=["buggy", "fixed", "approval"],
        help=(
            "buggy = the scripted refund agent with no guard; fixed = the same agent behind PolicyGuard; "
            "approval = fixed with an approval queue: large unapproved refunds wait for a (scripted) supervisor"
        ),
    )
    run.add_argument("--output", required=True, help="output directory (per-trial JSON, summary.json, trace.jsonl)")
    run.add_argument(
        "--eval",
        default=None,
        help="eval spec YAML (default: the shipped benchmarks/refund/eval.yaml, also in an installed wheel)",
    )
    run.add_argument(
        "--ledger",
        choices=["available", "unavailable"],
        default="available",
        help="'unavailable' makes the final-state verifier's ledger connection fail (result: inconclusive)",
    )
    run.add_argument(
        "--store",
        default="sqlite:///:memory:",
        metavar="URL",
        help="the fixed target's guard store (nonces, denials, effect ledger): sqlite:///:memory: (default, "
        "one per trial) or postgresql://... (a scratch schema per trial, dropped afterwards)",
    )
    run.add_argument("--repetitions", type=int, default=None, help="override the spec's repetitions")
    run.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    run.set_defaults(func=_run)

    inspect = bench_subparsers.add_parser("inspect", help="print the summary table of a refund run directory")
    inspect.add_argument("output", help="a directory written by 'policyguard bench refund'")
    inspect.set_defaults(func=_inspect)


def _run(args: argparse.Namespace) -> int:
    from policyguard.bench.refund import format_summary, load_eval, run_eval
    from policyguard.bench.refund.run import summary_json
    from policyguard.enforcement.store import LedgerUnavailable
    from policyguard.errors import ConfigError

    path = Path(args.eval) if args.eval else _default_eval()
    if not path.is_file():
        raise ConfigError(f"{path}: eval spec not found (pass --eval)")
    if args.repetitions is not None and args.repetitions < 1:
        raise ConfigError("--repetitions must be at least 1")
    try:
        summary = run_eval(
            load_eval(path),
            args.target,
            args.output,
            ledger=args.ledger,
            repetitions=args.repetitions,
            store=args.store,
        )
    except LedgerUnavailable as exc:
        print(f"policyguard: inconclusive: --store: {exc}", file=sys.stderr)
        return 3
    print(summary_json(summary) if args.json else format_summary(summary))
    return summary.exit_code


def _inspect(args: argparse.Namespace) -> int:
    from policyguard.bench.refund import format_summary, load_summary

    print(format_summary(load_summary(args.output)))
    return 0
