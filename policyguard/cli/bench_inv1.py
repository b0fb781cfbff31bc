"""``policyguard bench inv1``: the INV-1 fault-injection matrix (gated vs ungated)."""

from __future__ import annotations

import argparse
import json


def register(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = bench_subparsers.add_parser(
        "inv1",
        help="inject dispatch faults and count INV-1 violations (gated vs ungated executor)",
        description=(
            "Runs every scenario with three executors (gated: in-memory verdict-gated state machine; "
            "grants: signed call-bound grants verified over a SQLite nonce/deny store; ungated), replays "
            "each emitted trace through the INV-1 checker and compares with the harness's own count. "
            "Exit 1 if a gated executor has any violation or the checker disagrees with the ground truth."
        ),
    )
    parser.add_argument("--calls", type=int, default=200, help="tool calls per scenario (default 200)")
    parser.add_argument("--seed", type=int, default=7, help="RNG seed (default 7)")
    parser.add_argument("--trace-dir", default=None, help="write each scenario's trace here as JSONL")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from policyguard.bench.harness import run_matrix
    from policyguard.errors import ConfigError

    if args.calls < 1:
        raise ConfigError("--calls must be at least 1")
    results = run_matrix(calls=args.calls, seed=args.seed, trace_dir=args.trace_dir)
    gated_clean = all(r.violations == 0 for r in results if r.executor != "ungated")
    agree = all(r.agrees for r in results)
    if args.json:
        payload = {
            "calls": args.calls,
            "seed": args.seed,
            "gated_violations": sum(r.violations for r in results if r.executor == "gated"),
            "grants_violations": sum(r.violations for r in results if r.executor == "grants"),
            "ungated_violations": sum(r.violations for r in results if r.executor == "ungated"),
            "checker_agrees_with_ground_truth": agree,
            "scenarios": [r.model_dump(mode="json") for r in results],
        }
        print(json.dumps(payload, indent=2))
    else:
        header = f"{'executor':9s} {'scenario':26s} {'faults':>6s} {'events':>6s} {'executes':>8s} {'violations':>10s}"
        print(header)
        print("-" * len(header))
        for r in results:
            mark = "" if r.agrees else f"  (ground truth {r.expected_violations})"
            kinds = ", ".join(f"{k}={n}" for k, n in r.by_kind.items() if n)
            print(
                f"{r.executor:9s} {r.scenario:26s} {r.faults_injected:6d} {r.events:6d} {r.executes:8d} "
                f"{r.violations:10d}{mark}" + (f"  [{kinds}]" if kinds else "")
            )
        print(
            f"\ngated and grants: {'0 violations in every scenario' if gated_clean else 'VIOLATIONS FOUND'}; "
            f"checker vs ground truth: {'agree' if agree else 'DISAGREE'}"
        )
    return 0 if gated_clean and agree else 1
