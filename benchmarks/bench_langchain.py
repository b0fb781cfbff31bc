"""What the LangChain middleware adds per guarded tool call (median over N calls).

Run: ``python benchmarks/bench_langchain.py [--n 300] [--turns 5 25]``. Prints, per
conversation length (user/assistant/tool turns in the agent state):

(a) ``wrap_tool_call`` around a no-op tool for a *mutating* call: read the
    state's LangChain messages, Guard.check with the gate (one CEL check),
    override the request - gate only (``model none``), and gate + verifier on
    a ScriptedModel that answers at once (prompt build and verdict parse, no
    network: a real model's own latency comes on top);
(b) the same for a read-only call (the dialogue is not read);
(c) end to end: ``agent.invoke`` of a real ``create_agent`` graph making one
    write, with and without the middleware; the difference is the added cost.

Figures are medians in microseconds, wall and CPU time (p90 of the wall time in brackets);
the CPU figure is the steadier one on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolCallRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from policyguard import Guard, ScriptedModel, parse_checklist
from policyguard.integrations.langchain import PolicyGuardMiddleware
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.llm import LLMVerifier

POLICY = "Never refund more than 100 USD. Refund only after the user says yes.\n"
CHECKLIST = f"""
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: ceiling
        text: A refund is at most 100 USD.
        kind: data
        source: Never refund more than 100 USD.
        check: args.amount <= 100
      - id: confirmed
        text: The user said yes.
        kind: procedural
        source: Refund only after the user says yes.
"""
VERDICT = json.dumps(
    {
        "requirements": [{"id": "confirmed", "status": "MET", "evidence": "yes", "evidence_messages": [0]}],
        "verdict": "PASS",
        "remediation": "",
    }
)


def guards(verdicts: int = 0) -> dict[str, Guard]:
    """A gate-only guard, and a guard whose scripted verifier has ``verdicts`` PASS answers."""
    checklist = parse_checklist(CHECKLIST, file="bench.yaml")
    from policyguard.gate.hardgate import HardGate

    gate_only = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)
    verifier = LLMVerifier(ScriptedModel([VERDICT] * verdicts))
    with_verifier = Guard(checklist, POLICY, gate=HardGate(checklist), verifier=verifier)
    return {"gate only": gate_only, "gate + scripted verifier": with_verifier}


def conversation(turns: int, pending: dict[str, Any]) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage("You are a support agent.")]
    for i in range(turns):
        messages.append(HumanMessage(f"Question {i} about order O{i}."))
        messages.append(AIMessage("", tool_calls=[{"name": "get_order", "args": {"order_id": f"O{i}"}, "id": f"r{i}"}]))
        messages.append(ToolMessage(json.dumps({"order_id": f"O{i}", "captured": 80}), tool_call_id=f"r{i}"))
        messages.append(AIMessage(f"Order O{i} captured 80 USD."))
    messages.append(HumanMessage("yes, refund it"))
    messages.append(AIMessage("", tool_calls=[pending]))
    return messages


def timed(n: int, step: Callable[[int], Any]) -> tuple[float, float, float]:
    """Median wall time, p90 wall time and median CPU time of ``step``, in microseconds.

    CPU time (``time.process_time``) is what the call costs this process; on a
    machine shared with other work the wall time also counts waiting for a core.
    """
    wall, cpu = [], []
    for i in range(min(20, n)):
        step(i)  # warm-up
    for i in range(n):
        started, started_cpu = time.perf_counter(), time.process_time()
        step(i)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    wall.sort()
    return statistics.median(wall) * 1e6, wall[int(len(wall) * 0.9)] * 1e6, statistics.median(cpu) * 1e6


def done(request: ToolCallRequest) -> ToolMessage:
    return ToolMessage("ok", tool_call_id=request.tool_call["id"])


def bench_wrap(n: int, turns: int) -> None:
    for label, guard in guards(verdicts=n + 20).items():
        middleware = PolicyGuardMiddleware(guard)
        for kind, name, args in (
            ("mutating", "issue_refund", {"order_id": "O1", "amount": 80}),
            ("read-only", "get_order", {"order_id": "O1"}),
        ):
            if kind == "read-only" and label != "gate only":
                continue  # no stage runs for a read-only call

            def step(
                i: int, name: str = name, args: dict[str, Any] = args, middleware: PolicyGuardMiddleware = middleware
            ) -> Any:
                pending = {"name": name, "args": args, "id": f"p{i}", "type": "tool_call"}
                state = {"messages": conversation(turns, pending)}
                request = ToolCallRequest(tool_call=pending, tool=None, state=state, runtime=None)  # type: ignore[arg-type]
                return middleware.wrap_tool_call(request, done)

            def baseline(i: int, name: str = name, args: dict[str, Any] = args) -> Any:
                pending = {"name": name, "args": args, "id": f"p{i}", "type": "tool_call"}
                state = {"messages": conversation(turns, pending)}
                return done(ToolCallRequest(tool_call=pending, tool=None, state=state, runtime=None))  # type: ignore[arg-type]

            guarded, p90, guarded_cpu = timed(n, step)
            bare, _, bare_cpu = timed(n, baseline)
            messages = 4 * turns + 3
            print(
                f"  {messages:4d} messages  {kind:9s}  {label:26s}  added {guarded - bare:8.1f} us wall, "
                f"{guarded_cpu - bare_cpu:8.1f} us CPU  (guarded {guarded:8.1f}, p90 {p90:8.1f}; "
                f"building the request alone {bare:6.1f})"
            )


class Replay(BaseChatModel):
    """A chat model that makes one refund, then answers."""

    @property
    def _llm_type(self) -> str:
        return "replay"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage("Refunded.")
        else:
            refund = {"name": "issue_refund", "args": {"order_id": "O1", "amount": 80}, "id": f"w{len(messages)}"}
            reply = AIMessage("", tool_calls=[refund])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return "refund issued"


def bench_agent(n: int) -> None:
    guard = guards()["gate only"]
    plain = create_agent(Replay(), [issue_refund])
    guarded = create_agent(Replay(), [issue_refund], middleware=[PolicyGuardMiddleware(guard)])
    state = {"messages": [HumanMessage("yes, refund O1")]}
    for _ in range(20):  # warm-up
        plain.invoke(state), guarded.invoke(state)
    pairs = []
    for _ in range(n):  # interleaved, so a busy spell on a shared machine hits both alike
        started = time.perf_counter()
        plain.invoke(state)
        middle = time.perf_counter()
        guarded.invoke(state)
        pairs.append((middle - started, time.perf_counter() - middle))
    without = statistics.median(a for a, _ in pairs) * 1e6
    with_guard = statistics.median(b for _, b in pairs) * 1e6
    p90 = sorted(b for _, b in pairs)[int(n * 0.9)] * 1e6
    print(
        f"  agent.invoke with one write: {without:8.1f} us without, {with_guard:8.1f} us with the middleware "
        f"(p90 {p90:8.1f}): added {with_guard - without:8.1f} us per guarded call"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="timed calls per figure (>= 200 for the README)")
    parser.add_argument("--turns", type=int, nargs="+", default=[5, 25], help="conversation lengths, in turns")
    args = parser.parse_args()
    print(f"PolicyGuardMiddleware.wrap_tool_call, median over {args.n} calls:")
    for turns in args.turns:
        bench_wrap(args.n, turns)
    print(f"create_agent end to end, median over {args.n} runs:")
    bench_agent(args.n)


if __name__ == "__main__":
    main()
