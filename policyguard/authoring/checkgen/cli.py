"""``policyguard checklist generate``: write a checklist for a policy and its tools with a model.

The ``checklist`` command itself lives in :mod:`policyguard.cli.cmd_checklist`,
which calls :func:`add_generate_parser`. Exit codes: 0 the checklist was
written and validates; 1 it was written but validation problems remain (fix
them by hand); 2 bad input or a step failed (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_generate_parser(checklist_subparsers: Any) -> None:
    """Add the ``generate`` sub-command to ``policyguard checklist``."""
    parser = checklist_subparsers.add_parser(
        "generate",
        help="generate a checklist from a policy and tool schemas with a model",
        description=(
            "Classify the tools, draft per-tool requirements and general rules, have a reviewer pass "
            "correct them against the policy, write the checklist atomically and validate it. Model "
            "responses are cached by content hash, so a re-run is free; each step's prompt, raw "
            "response and parsed result are kept in OUT.yaml.steps/."
        ),
    )
    parser.add_argument("--policy", required=True, metavar="POLICY.md", help="the policy text")
    parser.add_argument(
        "--tools",
        required=True,
        metavar="TOOLS",
        help="OpenAI or Anthropic tool schemas (JSON), or a tau2 toolkit path such as "
        "tau2.domains.airline.tools:AirlineTools",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="M",
        help="model spec: a LiteLLM name (e.g. openai/gpt-4.1, or litellm:NAME), 'openai-sdk:MODEL' or "
        "'anthropic-sdk:MODEL' (direct SDKs, extras openai/anthropic), 'scripted:FILE.json' (recorded answers, "
        "no network); 'none' is refused: generating needs a model",
    )
    parser.add_argument("-o", "--output", required=True, metavar="OUT.yaml", help="where to write the checklist")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="take each step whose inputs are unchanged from its record in OUT.yaml.steps/ (after a crash, "
        "or to keep a hand-corrected step output)",
    )
    parser.add_argument("--cache-dir", metavar="DIR", help="response cache (default: OUT.yaml.cache/)")
    parser.add_argument("--policy-name", metavar="NAME", help="name recorded in the checklist (default: from the path)")
    parser.set_defaults(func=run_generate)


def default_policy_name(path: Path) -> str:
    """``airline/policy.md`` -> ``airline``; ``refunds.md`` -> ``refunds``."""
    stem = path.stem
    if stem.lower() in {"policy", "policies", "main_policy"} and path.resolve().parent.name:
        return path.resolve().parent.name
    return stem


def run_generate(args: argparse.Namespace) -> int:
    from policyguard.errors import PolicyGuardError
    from policyguard.verifier.models import resolve_model

    from ..tools import load_tools
    from ..validate import checklist_stats
    from .pipeline import generate_checklist

    def fail(message: str) -> int:
        print(f"policyguard: error: {message}", file=sys.stderr)
        return 2

    policy_path = Path(args.policy)
    output = Path(args.output)
    try:
        policy_text = policy_path.read_text(encoding="utf-8")
    except OSError as exc:
        return fail(f"{policy_path}: cannot read policy: {exc.strerror}")
    try:
        tools = load_tools(args.tools)
        model = resolve_model(args.model)
    except PolicyGuardError as exc:
        return fail(str(exc))
    if model is None:
        return fail("--model none: generating a checklist needs a model")
    try:
        result = generate_checklist(
            policy_text,
            tools,
            model,
            output,
            policy_name=args.policy_name or default_policy_name(policy_path),
            policy_path=str(args.policy),
            cache_dir=args.cache_dir,
            resume=args.resume,
            log=lambda msg: print(f"policyguard: {msg}", file=sys.stderr),
        )
    except PolicyGuardError as exc:
        return fail(f"{exc}\nnothing was written to {output}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in result.problems:
        print(str(problem), file=sys.stderr)
    print(
        f"wrote {output}: {checklist_stats(result.checklist)}; {result.model_calls} model call(s); "
        f"step records in {result.steps_dir}"
    )
    if not result.ok:
        errors = sum(1 for p in result.problems if p.severity == "error")
        print(
            f"{errors} validation error(s) remain; {output} was written anyway so a person can fix it "
            f"(then run the validator again)",
            file=sys.stderr,
        )
        return 1
    return 0
