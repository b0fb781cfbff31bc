"""Guard foundation figures: import cost, per-decision overhead, verifier prompt size.

Run: python benchmarks/bench_guard.py [--decisions N]

Prints
* `import policyguard` wall time (median of fresh interpreters) and which heavy
  modules it pulls in (target: <= 0.15 s and none of litellm/openai/anthropic);
* guard overhead per decision excluding the model (ScriptedModel answers
  instantly), p50/p99, for a read-only call, a gate-only decision and
  gate + verifier;
* verifier prompt size in tokens for the shipped airline checklist and a
  realistic dialogue, and the share in the cacheable static prefix (target >= 70%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("litellm", "openai", "anthropic", "tau2", "cel", "jwt", "matplotlib", "numpy", "pandas", "httpx")


def import_time(runs: int = 9) -> tuple[float, list[str]]:
    code = (
        "import time, sys; t=time.perf_counter(); import policyguard; d=time.perf_counter()-t; "
        f"print(d); print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    times, heavy = [], ""
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(
            "\n"
        )
        times.append(float(out[0]))
        heavy = out[1]
    return statistics.median(times), [m for m in heavy.split(",") if m]


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def overhead(decisions: int) -> dict[str, tuple[float, float]]:
    from policyguard import ScriptedModel, load_checklist
    from policyguard.gate.hardgate import HardGate
    from policyguard.guard.core import Guard
    from policyguard.verifier.llm import LLMVerifier

    airline = _airline()
    if airline is None:
        return {}
    checklist_path, policy_text, trajectory, call, read = airline
    checklist = load_checklist(checklist_path)
    ids = [r.id for r in checklist.requirements_for(call.name)]
    answer = json.dumps(
        {
            "requirements": [
                {"id": i, "status": "MET", "evidence": "18: the user said yes", "evidence_messages": [12, 18]}
                for i in ids
            ],
            "verdict": "PASS",
            "remediation": "",
        }
    )
    results: dict[str, tuple[float, float]] = {}
    print(f"dialogue: {len(trajectory.messages)} messages; pending call: {call.name}({call.arguments})")
    gate_only = Guard(checklist, policy_text, gate=HardGate(checklist), allow_unverified=True)
    for label, guard, the_call in (("read-only call", gate_only, read), ("gate only", gate_only, call)):
        samples = []
        for _ in range(decisions):
            t = time.perf_counter()
            guard.check(the_call, trajectory)
            samples.append(time.perf_counter() - t)
        results[label] = percentiles(samples)
    model = ScriptedModel([answer] * decisions)
    full = Guard(checklist, policy_text, gate=HardGate(checklist), verifier=LLMVerifier(model))
    samples = []
    for _ in range(decisions):
        t = time.perf_counter()
        decision = full.check(call, trajectory)
        samples.append(time.perf_counter() - t)
    assert decision.outcome == "allow", decision
    results["gate + verifier (scripted model)"] = percentiles(samples)
    return results


def prompt_size() -> tuple[int, int] | None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from policyguard import ScriptedModel, load_checklist
    from policyguard.guard.core import Guard
    from policyguard.verifier.llm import LLMVerifier

    airline = _airline()
    if airline is None:
        return None
    checklist_path, policy_text, trajectory, call, _ = airline
    checklist = load_checklist(checklist_path)
    verifier = LLMVerifier(ScriptedModel())
    guard = Guard(checklist, policy_text, verifier=verifier)
    request = verifier.build_request(call, trajectory, guard.context())
    import litellm

    def count(text: str) -> int:
        return int(litellm.token_counter(model="gpt-4o", text=text))

    static = sum(count(p.content) for p in request.parts if p.cache)
    total = sum(count(p.content) for p in request.parts)
    return static, total


def long_dialogue_prompt(messages: int = 50_000) -> dict[str, float] | None:
    """The verifier prompt for the airline cancellation after ``messages`` more messages of chatter and reads.

    Returns the estimated tokens (UTF-8 bytes / 4) of the whole dialogue's rendering
    (lower bound, the size that triggers eliding), of the prompt actually sent,
    the messages elided and the seconds ``prepare`` took.
    """
    from policyguard import Message, ScriptedModel, ToolCall, Trajectory, load_checklist
    from policyguard.guard.core import Guard
    from policyguard.verifier.llm import LLMVerifier

    airline = _airline()
    if airline is None:
        return None
    checklist_path, policy_text, trajectory, call, _ = airline
    head, tail = trajectory.messages[:14], trajectory.messages[14:]
    filler: list[Message] = []
    for i in range(messages // 4):
        read = ToolCall(
            id=f"f{i}", name="get_flight_status", arguments={"flight_number": "HAT204", "date": "2024-05-21"}
        )
        filler += [
            Message(role="user", content=f"And what about my other flight, number {i}?"),
            Message(role="assistant", content="Let me check.", tool_calls=[read]),
            Message(role="tool", tool_call_id=read.id, content="available"),
            Message(role="assistant", content="That flight is available."),
        ]
    long = Trajectory(messages=[*head, *filler, *tail])
    checklist = load_checklist(checklist_path)
    verifier = LLMVerifier(ScriptedModel())
    context = Guard(checklist, policy_text, verifier=verifier).context()
    started = time.perf_counter()
    prepared = verifier.prepare(call, long, context)
    elapsed = time.perf_counter() - started
    from policyguard.verifier.dialogue import build_rows, conversation_json, estimate_tokens

    whole = estimate_tokens(conversation_json(r.line for r in build_rows(long, call.id, tools_only=False)))
    return {
        "messages": len(long.messages),
        "whole_dialogue_tokens": whole,
        "prompt_tokens": prepared.estimated_tokens,
        "elided": prepared.view.elided,
        "seconds": elapsed,
    }


def _airline():  # type: ignore[no-untyped-def]
    """The shipped airline checklist, tau2's policy and a realistic 24-message cancellation dialogue.

    Every tool result is what tau2's own tools return on its real database. None without tau2.
    """
    try:
        from policyguard.bench.tau2.domain import DomainData
        from policyguard.bench.tau2.transcript import Transcript, as_call
        from policyguard.resources import shipped_checklist
    except ImportError:
        return None
    try:
        data = DomainData.load("airline")
    except Exception:
        return None
    reservations = data.raw_db["reservations"]
    rid, reservation = next((k, r) for k, r in sorted(reservations.items()) if r["cabin"] == "business")
    user_id = reservation["user_id"]
    other = (
        next(k for k in data.raw_db["users"][user_id]["reservations"] if k != rid)
        if len(data.raw_db["users"][user_id]["reservations"]) > 1
        else rid
    )
    t = Transcript(data.fresh_env())
    t.user("Hi, I need to cancel one of my trips.")
    t.say("I can help with that. Could you give me your user id?")
    t.user(f"Sure, it's {user_id}.")
    t.call("get_user_details", {"user_id": user_id})
    t.say("Thanks. Which reservation would you like to cancel?")
    t.user(f"I'm not sure of the code, could you check {other} first?")
    t.call("get_reservation_details", {"reservation_id": other})
    t.say("That one is a different trip. Do you have another reservation code?")
    t.user(f"Oh right, it's {rid}.")
    t.call("get_reservation_details", {"reservation_id": rid})
    flight = reservation["flights"][0]
    t.call("get_flight_status", {"flight_number": flight["flight_number"], "date": flight["date"]})
    t.say("May I ask why you would like to cancel?")
    t.user("My plans changed, I can't travel anymore.")
    t.say(
        f"Here is what I will do: cancel reservation {rid} ({reservation['origin']} to "
        f"{reservation['destination']}, business cabin); the refund goes to the original payment "
        "method within 5 to 7 business days. Shall I proceed (yes/no)?"
    )
    t.user("Yes, please go ahead.")
    pending = t.new_call("cancel_reservation", {"reservation_id": rid})
    from policyguard import Message

    trajectory = t.trajectory()
    trajectory.append(Message(role="assistant", tool_calls=[as_call(pending)]))
    read = as_call(t.new_call("get_reservation_details", {"reservation_id": rid}))
    return shipped_checklist("airline"), data.policy_text, trajectory, as_call(pending), read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=2000)
    args = parser.parse_args()
    median, heavy = import_time()
    print(f"import policyguard: median {median * 1000:.1f} ms over 9 fresh interpreters (target <= 150 ms)")
    print(f"heavy modules loaded by the import: {', '.join(heavy) or 'none'}")
    results = overhead(args.decisions)
    if not results:
        print("overhead: skipped (needs the tau2 extra for the airline checklist and dialogue)")
    for label, (p50, p99) in results.items():
        print(f"guard overhead, {label}: p50 {p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us ({args.decisions} decisions)")
    sizes = prompt_size()
    if sizes is None:
        print("prompt size: skipped (needs the tau2 extra)")
    else:
        static, total = sizes
        print(
            f"verifier prompt: {total} tokens, static cacheable prefix {static} tokens "
            f"= {100 * static / total:.1f}% (target >= 70%)"
        )
    long = long_dialogue_prompt()
    if long is not None:
        print(
            f"verifier prompt after {long['messages']:,.0f} messages: the whole dialogue would be "
            f"~{long['whole_dialogue_tokens']:,.0f} tokens; sent ~{long['prompt_tokens']:,.0f} tokens "
            f"(UTF-8 bytes / 4) with {long['elided']:,.0f} messages elided; prepared in {long['seconds']:.2f} s"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
