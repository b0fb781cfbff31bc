"""What the OpenAI Agents SDK guard adds to a guarded call, through the real ``agents.Runner``.

Run: ``python benchmarks/bench_agents_sdk.py [--runs 300] [--history 20]``
(needs ``pip install -c constraints.txt -e '.[agents]'``; no network, no key). Each run is three
scripted model turns: read the order, refund it, answer. The guard is
gate-only (``model none``), so the figures are the adapter plus the gate, not a
verifier model. ``--history`` earlier user/assistant/read items are passed as
the run's input, so the conversation the guard converts has a realistic size.

Prints, each a median (and p95) over ``--runs`` calls:

(a) the guardrail per guarded call: finding the model turn, reading the
    conversation with the Responses reader, ``Guard.acheck`` (gate), and of
    that the ``Guard.acheck`` part alone;
(b) the hooks per model turn (they record what the model saw; every turn pays
    them, read-only or not);
(c) one whole run with and without the guard, and their difference: the added
    latency of one guarded write plus three hooked model turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, function_tool
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from policyguard import Guard
from policyguard.integrations.agents_sdk import AgentsSDKGuard
from policyguard.trajectory.canonical import policy_version

POLICY = "Refund at most the amount captured for the order.\n"
CHECKLIST = f"""
schema_version: 1
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
facts:
  order: {{tool: get_order, match: {{order_id: args.order_id}}}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: refund.within_captured
        text: The refund must not exceed the amount captured for the order.
        kind: data
        source: Refund at most the amount captured for the order.
        check: args.amount <= facts.order.captured
"""


class Scripted(Model):
    """Answers read, refund, done, forever."""

    def __init__(self) -> None:
        self.turn = 0
        self.queue: deque[list[Any]] = deque()

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if not self.queue:
            self.turn += 1
            n = self.turn
            self.queue.extend(
                [
                    [_call(f"r{n}", "get_order", {"order_id": "O1"})],
                    [_call(f"w{n}", "issue_refund", {"order_id": "O1", "amount": 5})],
                    [_say("Refunded.")],
                ]
            )
        return ModelResponse(output=self.queue.popleft(), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _call(call_id: str, name: str, args: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=json.dumps(args))


def _say(text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=[part])


@function_tool
def get_order(order_id: str) -> str:
    """Look up an order."""
    return json.dumps({"order_id": order_id, "captured": 80})


@function_tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund part of an order."""
    return json.dumps({"order_id": order_id, "refunded": amount})


def _history(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n // 4):
        items += [
            {"role": "user", "content": f"Question {i} about my account, with some words to make it realistic."},
            {"type": "function_call", "call_id": f"h{i}", "name": "get_order", "arguments": '{"order_id": "O9"}'},
            {"type": "function_call_output", "call_id": f"h{i}", "output": '{"order_id": "O9", "captured": 10}'},
            {"role": "assistant", "content": f"Answer {i}: your order O9 captured 10 USD."},
        ]
    return [*items, {"role": "user", "content": "Please refund 5 on order O1."}]


def _timed(function: Any, sink: list[float]) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await function(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - started)

    return wrapper


def _line(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{label:<44} median {statistics.median(values) * 1e6:9.1f} us   p95 {p95 * 1e6:9.1f} us   n={len(values)}"


async def _runs(agent: Agent[Any], history: Any, runs: int) -> list[float]:
    config = RunConfig(tracing_disabled=True)
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        result = await Runner.run(agent, history, run_config=config)
        times.append(time.perf_counter() - started)
        assert result.final_output == "Refunded.", result.final_output
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per configuration (one guarded call each)")
    parser.add_argument("--history", type=int, default=20, help="earlier conversation items in the run's input")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "policy.md").write_text(POLICY)
        (Path(folder) / "checklist.yaml").write_text(CHECKLIST)
        guard = Guard.from_files(policy=Path(folder) / "policy.md", checklist=Path(folder) / "checklist.yaml")
    adapter = AgentsSDKGuard(guard)
    guardrail_times: list[float] = []
    hook_times: list[float] = []
    check_times: list[float] = []
    adapter.guardrail.guardrail_function = _timed(adapter.guardrail.guardrail_function, guardrail_times)
    guard.acheck = _timed(guard.acheck, check_times)  # type: ignore[method-assign]
    plain = Agent(name="support", tools=[get_order, issue_refund], model=Scripted())
    guarded = adapter.agent(Agent(name="support", tools=[get_order, issue_refund], model=Scripted()))
    hooks = guarded.hooks
    assert hooks is not None
    hooks.on_llm_start = _timed(hooks.on_llm_start, hook_times)  # type: ignore[method-assign]
    hooks.on_llm_end = _timed(hooks.on_llm_end, hook_times)  # type: ignore[method-assign]
    history = _history(args.history)

    async def measure() -> tuple[list[float], list[float]]:
        await _runs(plain, history, 20)  # warm-up, both paths
        await _runs(guarded, history, 20)
        guardrail_times.clear()
        hook_times.clear()
        check_times.clear()
        unguarded_runs, guarded_runs = [], []
        for _ in range(args.runs):  # interleaved, so drift hits both alike
            unguarded_runs += await _runs(plain, history, 1)
            guarded_runs += await _runs(guarded, history, 1)
        return unguarded_runs, guarded_runs

    unguarded_runs, guarded_runs = asyncio.run(measure())
    counters = guard.counters
    assert counters.blocked == 0 and len(guardrail_times) == args.runs, counters
    per_turn = [a + b for a, b in zip(hook_times[0::2], hook_times[1::2], strict=True)]
    print(f"openai-agents Runner, gate-only guard, {len(history)} input items, {args.runs} runs")
    print(_line("(a) guardrail per guarded call", guardrail_times))
    print(_line("    of which Guard.acheck (the gate)", check_times))
    print(_line("(b) hooks per model turn (start + end)", per_turn))
    print(_line("(c) one run, unguarded", unguarded_runs))
    print(_line("    one run, guarded", guarded_runs))
    added = statistics.median(guarded_runs) - statistics.median(unguarded_runs)
    print(f"    added per run (1 guarded call, 3 turns)  {added * 1e6:9.1f} us (difference of medians)")


if __name__ == "__main__":
    main()
