"""The hard gate's real workload: every (call, trajectory) the airline replay asks it to decide.

``python benchmarks/gate_decisions.py capture [--domain airline] [--out FILE]``
runs ``bench replay`` (gate_only, the default) with the gate wrapped, and writes
each decision's inputs and output to a gzipped JSON file:
``{"checklist": ..., "cases": [{"call", "trajectory", "now", "principal", "decision"}]}``.
The trajectories share most of their messages, so each distinct message is
stored once and a case lists message indexes.

``tests/gate/test_replay_decisions.py`` replays that file through the gate and
requires every decision to be identical; ``benchmarks/bench_gate_replay.py``
times it. Re-capture only when the replay itself changes (new tasks, reads or
violations), never to make a changed decision pass.
"""

from __future__ import annotations

import argparse
import gzip
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.resources import shipped_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "gate" / "data" / "airline_replay_decisions.json.gz"


def decision_record(decision: Decision) -> dict[str, Any]:
    """What must stay identical: the whole decision, every field.

    ``approval_id`` (the approval queue) and ``session_id`` (sessions) came to
    Decision after the recording; the gate never sets them, so they are
    compared only when set.
    """
    record = decision.model_dump(mode="json")
    for later in ("approval_id", "session_id"):
        if record.get(later) is None:
            record.pop(later, None)
    return record


def capture(domain: str) -> dict[str, Any]:
    from policyguard.bench.tau2.domain import DomainData, quiet_tau2_logs
    from policyguard.bench.tau2.guarding import build_guard
    from policyguard.bench.tau2.replay import ReplaySuite

    quiet_tau2_logs()
    data = DomainData.load(domain)
    checklist = load_checklist(shipped_checklist(domain))
    guard = build_guard("gate_only", checklist, data.policy_text)
    assert guard is not None and isinstance(guard.gate, HardGate)
    gate = guard.gate
    messages: dict[str, int] = {}
    cases: list[dict[str, Any]] = []
    original = gate.check

    def recording(call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        decision = original(call, trajectory, context)
        indexes = []
        for message in trajectory.messages:
            text = message.model_dump_json()
            indexes.append(messages.setdefault(text, len(messages)))
        cases.append(
            {
                "call": call.model_dump(mode="json"),
                "trajectory": indexes,
                "now": context.now.isoformat(),
                "principal": context.principal,
                "decision": decision_record(decision),
            }
        )
        return decision

    gate.check = recording  # type: ignore[method-assign]
    ReplaySuite(data, checklist, guard, config="gate_only").run(evaluate_tasks=[])
    return {
        "domain": domain,
        "messages": [json.loads(text) for text in messages],
        "cases": cases,
    }


def load_cases(
    path: Path = FIXTURE,
) -> tuple[Checklist, list[tuple[ToolCall, Trajectory, CheckContext, dict[str, Any]]]]:
    """The checklist and each case as (call, trajectory, context, expected decision record)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    checklist = load_checklist(shipped_checklist(raw["domain"]))
    messages = [Message.model_validate(m) for m in raw["messages"]]
    out = []
    for case in raw["cases"]:
        trajectory = Trajectory(messages=[messages[i].model_copy(deep=True) for i in case["trajectory"]])
        context = CheckContext(
            checklist=checklist,
            policy_text="",
            now=datetime.fromisoformat(case["now"]),
            principal=case["principal"],
        )
        out.append((ToolCall.model_validate(case["call"]), trajectory, context, case["decision"]))
    return checklist, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["capture"])
    parser.add_argument("--domain", default="airline", choices=["airline", "retail"])
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    payload = capture(args.domain)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as handle:
        json.dump(payload, handle, separators=(",", ":"), sort_keys=True)
    print(f"{len(payload['cases'])} decisions, {len(payload['messages'])} distinct messages -> {args.out}")


if __name__ == "__main__":
    main()
