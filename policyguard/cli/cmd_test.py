"""``policyguard test SCENARIOS.yaml``: run whole decisions and compare them with what the team expects.

Exit 0 when every scenario decides as expected, 1 with one line per scenario
that did not (expected and actual outcome, the requirements), 2 when a file
cannot be used (the scenarios file names file:line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from policyguard.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalQueue
    from policyguard.authoring.scenarios import Scenario
    from policyguard.checklist.schema import Checklist
    from policyguard.decision import Decision
    from policyguard.stages import Gate
    from policyguard.verifier.models.base import Model


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "test",
        help="run scenarios (a dialogue, a call, the expected outcome) against a policy and checklist",
        description=(
            "Each scenario is decided by a fresh guard, as 'policyguard verify' would decide it. Exit 0 when every "
            "scenario decides as expected, 1 when one does not (a line per scenario names the expected and actual "
            "outcome and the requirements), 2 when a file cannot be used (naming file:line). A scenario's "
            "'verdicts:' file (recorded verifier answers, the scripted-model format) makes a model's part "
            "deterministic in CI; --model applies to the scenarios without one."
        ),
    )
    parser.add_argument("scenarios", type=Path, metavar="SCENARIOS.yaml", help="the scenarios file")
    parser.add_argument("--policy", required=True, type=Path, help="the policy text (markdown)")
    parser.add_argument("--checklist", required=True, type=Path, help="the checklist YAML")
    parser.add_argument(
        "--model",
        default="none",
        help="verifier model for scenarios without 'verdicts:' (as for verify: 'none' = gate only, default; "
        "'scripted:FILE.json' plays recorded answers in order across those scenarios)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from policyguard.authoring.scenarios import load_scenarios
    from policyguard.checklist.schema import load_checklist
    from policyguard.gate.hardgate import HardGate
    from policyguard.verifier.models import resolve_model

    checklist = load_checklist(args.checklist)
    try:
        policy_text = args.policy.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{args.policy}: cannot read the policy: {exc}") from None
    checklist.check_policy(policy_text)
    scenarios = load_scenarios(args.scenarios)
    gate, model = HardGate(checklist), resolve_model(args.model)
    failed = 0
    for scenario in scenarios:
        decision = decide(scenario, checklist, policy_text, gate, model)
        problems = differences(scenario, decision)
        failed += bool(problems)
        print(_line(scenario, decision, problems))
    print(f"{args.scenarios}: {len(scenarios) - failed} of {len(scenarios)} scenario(s) as expected", file=sys.stderr)
    return 1 if failed else 0


def decide(scenario: Scenario, checklist: Checklist, policy_text: str, gate: Gate, model: Model | None) -> Decision:
    """The decision a fresh guard (no earlier denials, its own approval queue) reaches on the scenario."""
    from policyguard.guard.core import Guard
    from policyguard.verifier.llm import LLMVerifier
    from policyguard.verifier.models.scripted import ScriptedModel

    backend = ScriptedModel.from_file(scenario.verdicts) if scenario.verdicts is not None else model
    verifier = LLMVerifier(backend) if backend is not None else None
    guard = Guard(
        checklist,
        policy_text,
        gate=gate,
        verifier=verifier,
        allow_unverified=backend is None,
        approvals=_queue() if _has_approvable(checklist) else None,
    )
    return guard.check(scenario.call, scenario.trajectory)


def outcome(decision: Decision) -> str:
    """allow, block (also a halt) or escalate (waits for a person in the approval queue)."""
    if decision.awaiting_approval:
        return "escalate"
    return "allow" if decision.allowed else "block"


def differences(scenario: Scenario, decision: Decision) -> list[str]:
    """What differs from the scenario's expectation (empty: as expected)."""
    problems = []
    actual = outcome(decision)
    if actual != scenario.expect:
        problems.append(f"expected {scenario.expect}, got {actual} (stage {decision.stage})")
    status = {r.id: r.status for r in decision.requirements}
    for req in scenario.not_met:
        if status.get(req) != "NOT_MET":
            problems.append(f"expected {req} NOT MET, it was {status.get(req, 'not judged')}")
    return problems


def _line(scenario: Scenario, decision: Decision, problems: list[str]) -> str:
    head = f"{'FAIL' if problems else 'ok  '} {scenario.name} ({scenario.where}): {outcome(decision)}"
    if not problems:
        return head
    judged = ", ".join(f"{r.id} {r.status}" for r in decision.requirements) or "none judged"
    return f"{head}\n    {'; '.join(problems)}\n    requirements: {judged}"


def _has_approvable(checklist: Checklist) -> bool:
    return any(r.approvable for spec in checklist.tools.values() for r in spec.requirements) or any(
        r.approvable for r in checklist.general_rules
    )


def _queue() -> ApprovalQueue:
    from policyguard.approvals.queue import SQLiteApprovalQueue
    from policyguard.enforcement.store import SQLiteStore

    return SQLiteApprovalQueue(SQLiteStore(":memory:"))
