"""What one guarded write costs as the conversation grows.

Run: ``python benchmarks/bench_session.py [--lengths 50,500,2000] [--runs 200] [--mcp | --mcp-only] [--one-shot]``

A refund conversation (``benchmarks/refund``'s policy and checklist, gate only)
is padded with user turns and read-only ``get_transaction`` calls to the given
number of messages; then one ``issue_refund`` is checked and run through
``GuardedTools.openai_chat`` (the README's drop-in loop), the way a loop sends
it: the whole message list, with the write's assistant message last. Each run
uses a fresh ``GuardedTools`` that has already seen the conversation up to the
write (a long-running loop's state), so the figure is the per-write cost, not
the first conversion. The lengths are sampled in turn, one sample of each per
round. Printed: the median and p90 per length, and the ratio of the longest to
the shortest.

With ``--mcp`` the same refund also goes through the MCP proxy's call path,
in process: ``GuardedUpstream.call_tool`` (the handler the proxy serves
``tools/call`` with) over an in-memory upstream that answers at once, so the
figure is the proxy's and the guard's work, not a transport's. There the
history grows through the proxy's own recorded calls, as a client's would: each
session repeats the three reads and a refund (8 messages), and the refund that
brings the history to at least N messages is the sample for N. Each run is a new
proxy session (a new guard session) on one shared guard.

With ``--one-shot`` the refund is also checked with ``Guard.check(call, messages)``
and no session: once with the list the guard checked the previous call with,
grown by the loop, once with a new list every call built around the same
message objects (``messages + [reply]``). The guard keys what it converted by
the first two message objects, so both convert only the messages it has not seen.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from policyguard import Guard, GuardedTools

HERE = Path(__file__).resolve().parent / "refund"


def tools() -> dict[str, Any]:
    def get_transaction(transaction_id: str) -> dict[str, Any]:
        return {"transaction_id": transaction_id, "captured": 120.0, "currency": "USD", "refunded": 0.0}

    def get_refund_policy(transaction_id: str) -> dict[str, Any]:
        return {"transaction_id": transaction_id, "refund_allowed": True}

    def get_approval(approval_id: str) -> dict[str, Any]:
        return {"approval_id": approval_id, "status": "none"}

    def escalate_to_human(reason: str = "") -> dict[str, Any]:
        return {"status": "queued"}

    def issue_refund(**arguments: Any) -> dict[str, Any]:
        return {"status": "refunded", **arguments}

    return {
        "get_transaction": get_transaction,
        "get_refund_policy": get_refund_policy,
        "get_approval": get_approval,
        "escalate_to_human": escalate_to_human,
        "issue_refund": issue_refund,
    }


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def conversation(length: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``length`` messages ending with the assistant message that carries the refund, and that call."""
    functions = tools()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a refunds agent."}]
    reads = [
        ("get_refund_policy", {"transaction_id": "T-1"}),
        ("get_transaction", {"transaction_id": "T-1"}),
        ("get_approval", {"approval_id": ""}),
    ]
    turn = 0
    while len(messages) < length - 1:
        turn += 1
        if len(messages) + 3 + 2 * len(reads) > length - 1:
            messages.append({"role": "user", "content": f"Filler question {turn}?"})
            continue
        name, arguments = reads[turn % len(reads)]
        messages.append({"role": "user", "content": f"Please check transaction T-1 again ({turn})."})
        messages.append({"role": "assistant", "content": None, "tool_calls": [call(f"r{turn}", name, arguments)]})
        result = functions[name](**arguments)
        messages.append({"role": "tool", "tool_call_id": f"r{turn}", "content": json.dumps(result)})
    # the two reads the refund relies on come last, so their facts are the newest
    for index, (name, arguments) in enumerate(reads):
        messages.append({"role": "assistant", "content": None, "tool_calls": [call(f"f{index}", name, arguments)]})
        result = functions[name](**arguments)
        messages.append({"role": "tool", "tool_call_id": f"f{index}", "content": json.dumps(result)})
    arguments = {"transaction_id": "T-1", "amount": 20.0, "currency": "USD", "idempotency_key": "refund:T-1"}
    refund = call("w1", "issue_refund", arguments)
    messages.append({"role": "assistant", "content": None, "tool_calls": [refund]})
    return messages, refund


def guard() -> Guard:
    return Guard.from_files(policy=HERE / "policy.md", checklist=HERE / "checklist.yaml", model="none")


Sampler = Callable[[], float]
K = TypeVar("K")


def guarded_tools_sampler(length: int) -> Sampler:
    """One guarded refund through a fresh ``GuardedTools`` that has seen the conversation up to it."""
    messages, refund = conversation(length)
    shared = guard()

    def sample() -> float:
        guarded = GuardedTools(shared, tools())
        guarded.openai_chat(messages[-3]["tool_calls"][0], messages[:-2])  # the loop has seen the history
        started = time.perf_counter()
        answer = guarded.openai_chat(refund, messages)
        elapsed = time.perf_counter() - started
        if "refunded" not in answer["content"]:
            sys.exit(f"the refund was not allowed at {length} messages: {answer['content']}")
        return elapsed

    return sample


def one_shot_sampler(length: int, *, same_list: bool) -> Sampler:
    """``Guard.check(refund, messages)`` without a session. ``same_list``: the loop appends to the list the guard
    checked its previous call with (the guard converts only the new messages); else a new list every call."""
    messages, refund = conversation(length)
    shared = guard()

    def sample() -> float:
        history = messages[:-2]
        shared.check(messages[-3]["tool_calls"][0], history)  # the previous call: the guard has seen the history
        if same_list:
            history.extend(messages[-2:])
        else:
            history = history + messages[-2:]
        started = time.perf_counter()
        decision = shared.check(refund, history)
        elapsed = time.perf_counter() - started
        if decision.outcome != "allow":
            sys.exit(f"the refund was not allowed at {length} messages: {decision.message}")
        return elapsed

    return sample


def interleaved(samplers: dict[K, Sampler], runs: int) -> dict[K, list[float]]:
    """``runs`` rounds, each one sample of every sampler in turn: a drift of the machine's speed, or of the heap the
    collector walks as earlier phases leave objects behind, falls on all of them alike (run one after the other,
    whichever one-shot variant ran first was 15-20% slower at 2,000 messages, and the ratio moved between 1.4x and
    2.3x from run to run)."""
    figures: dict[K, list[float]] = {key: [] for key in samplers}
    for _ in range(runs):
        for key, sample in samplers.items():
            figures[key].append(sample())
    return figures


READS = [
    ("get_refund_policy", {"transaction_id": "T-1"}),
    ("get_transaction", {"transaction_id": "T-1"}),
    ("get_approval", {"approval_id": ""}),
]


class InMemoryUpstream:
    """The upstream MCP server's ``tools/call``, answered in process by :func:`tools`."""

    def __init__(self) -> None:
        self.functions = tools()

    async def call_tool(self, name: str, arguments: dict[str, Any], **options: Any) -> Any:
        import mcp_types as types

        text = json.dumps(self.functions[name](**arguments))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def time_mcp_proxy(lengths: list[int], runs: int) -> dict[int, list[float]]:
    """Per length, the seconds one refund takes through the proxy once its session has that many messages."""
    import anyio

    return anyio.run(_mcp_runs, sorted(lengths), runs)


async def _mcp_runs(lengths: list[int], runs: int) -> dict[int, list[float]]:
    from types import SimpleNamespace

    import mcp_types as types

    from policyguard.integrations.mcp_proxy import GuardedUpstream

    shared = guard()
    figures: dict[int, list[float]] = {length: [] for length in lengths}
    schema = {"type": "object"}
    for _ in range(runs):
        proxy = GuardedUpstream(shared, InMemoryUpstream())  # type: ignore[arg-type]
        proxy.tools = {name: types.Tool(name=name, input_schema=schema) for name in tools()}
        stdio: Any = SimpleNamespace(request=None, session=SimpleNamespace(), request_id=1)
        history = proxy.session(stdio).trajectory.messages
        waiting = list(lengths)
        while waiting:
            for name, arguments in READS:
                await proxy.call_tool(stdio, types.CallToolRequestParams(name=name, arguments=arguments))
            arguments = {"transaction_id": "T-1", "amount": 20.0, "currency": "USD", "idempotency_key": "refund:T-1"}
            refund = types.CallToolRequestParams(name="issue_refund", arguments=arguments)
            started = time.perf_counter()
            result = await proxy.call_tool(stdio, refund)
            elapsed = time.perf_counter() - started
            if result.is_error:
                sys.exit(f"the refund was not allowed at {len(history)} messages: {result.content}")
            while waiting and len(history) >= waiting[0]:
                figures[waiting.pop(0)].append(elapsed)
    return figures


def report(label: str, lengths: list[int], figures: dict[int, list[float]]) -> None:
    print(f"{label}:")
    for length in lengths:
        samples = sorted(figures[length])
        p90 = samples[int(len(samples) * 0.9) - 1]
        print(f"  {length:>5} messages: median {statistics.median(samples) * 1e3:7.3f} ms, p90 {p90 * 1e3:7.3f} ms")
    ratio = statistics.median(figures[lengths[-1]]) / statistics.median(figures[lengths[0]])
    print(f"  {lengths[-1]} / {lengths[0]} messages: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="50,500,2000")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--mcp", action="store_true", help="also measure the MCP proxy's call path")
    parser.add_argument("--mcp-only", action="store_true", help="measure the MCP proxy's call path only")
    parser.add_argument(
        "--one-shot", action="store_true", help="also time Guard.check without a session (one list grown; new lists)"
    )
    options = parser.parse_args()
    lengths = [int(x) for x in options.lengths.split(",")]
    if not options.mcp_only:
        figures = interleaved({length: guarded_tools_sampler(length) for length in lengths}, options.runs)
        report("GuardedTools.openai_chat, one guarded refund", lengths, figures)
    if options.one_shot and not options.mcp_only:
        variants = ((True, "one list the loop appends to"), (False, "a new list every call"))
        samplers = {
            (label, length): one_shot_sampler(length, same_list=same_list)
            for same_list, label in variants
            for length in lengths
        }
        both = interleaved(samplers, options.runs)
        for _, label in variants:
            figures = {length: both[label, length] for length in lengths}
            report(f"Guard.check without a session, {label}", lengths, figures)
    if options.mcp or options.mcp_only:
        report(
            "MCP proxy (GuardedUpstream.call_tool), one guarded refund", lengths, time_mcp_proxy(lengths, options.runs)
        )


if __name__ == "__main__":
    main()
