"""Memory over a long run: does a guard with default settings stay flat?

Run: ``python benchmarks/bench_memory.py [--calls 100000]``. Builds
``Guard(checklist, policy, gate=HardGate(checklist), allow_unverified=True)`` -
default trace, no grants - and decides ``--calls`` refunds, each with its own
call id and one of 5,000 orders (so the parse cache sees many distinct tool
results, as a server with many dialogues would), printing the process RSS
(``/proc/self/statm``) after 0, 25 %, 50 % and 100 % of the calls, the in-memory
trace's length, and the growth per 1,000 calls over the second half.

``--lists`` hands each dialogue over as an OpenAI Chat message list instead of
a Trajectory, so the guard's cache of converted lists (bounded to
``HISTORY_ENTRIES`` lists and ``HISTORY_MESSAGES`` messages) fills and turns over.

``--grants`` also issues a grant per allow and has an executor verify and spend
it on a SQLite file in a scratch folder (the effect ledger grows on disk by
design; nonces are purged as they expire), with a simulated clock advanced 0.1 s
a call so grants expire during the run.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.gate.hardgate import HardGate
from policyguard.guard.core import Guard
from policyguard.trajectory.formats import from_trajectory
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

POLICY = "Refund only delivered orders, never more than was captured."
VERSION = "sha256:" + "1" * 64


def _checklist() -> Checklist:
    from policyguard.trajectory.canonical import policy_version

    return Checklist.model_validate(
        {
            "policy": {"name": "refunds", "version": policy_version(POLICY)},
            "facts": {"order": {"tool": "get_order", "match": {"order_id": "args.order_id"}}},
            "tools": {
                "get_order": {"mutating": False},
                "issue_refund": {
                    "requirements": [
                        {
                            "id": "delivered",
                            "text": "Only delivered orders are refunded.",
                            "kind": "data",
                            "source": "Refund only delivered orders",
                            "prerequisites": ["get_order"],
                            "check": 'facts.order.status == "delivered"',
                        },
                        {
                            "id": "within-captured",
                            "text": "Never refund more than was captured.",
                            "kind": "data",
                            "source": "never more than was captured",
                            "prerequisites": ["get_order"],
                            "check": "args.amount <= facts.order.captured",
                        },
                    ]
                },
            },
        }
    )


def _case(i: int) -> tuple[ToolCall, Trajectory]:
    order = f"O{i % 5000}"
    read = ToolCall(id=f"r{i}", name="get_order", arguments={"order_id": order})
    record = f'{{"order_id": "{order}", "status": "delivered", "captured": 1000, "lines": {list(range(20))}}}'
    trajectory = Trajectory(
        messages=[
            Message(role="user", content=f"Please refund 5 on {order}."),
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id=f"r{i}", content=record),
        ]
    )
    call = ToolCall(id=f"w{i}", name="issue_refund", arguments={"order_id": order, "amount": 5})
    return call, trajectory


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--grants", action="store_true", help="also issue, verify and spend a grant per allow")
    parser.add_argument("--lists", action="store_true", help="pass OpenAI Chat message lists, not Trajectory objects")
    args = parser.parse_args()
    checklist = _checklist()
    clock = [1_800_000_000.0]
    extra: dict[str, Any] = {}
    executor = None
    if args.grants:
        from policyguard.enforcement.executor import GuardedExecutor
        from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
        from policyguard.enforcement.store import SQLiteStore

        private_pem, public_pem = generate_keypair()
        folder = tempfile.mkdtemp(prefix="bench_memory")  # on disk: the effect ledger grows by design, RAM must not
        store = SQLiteStore(os.path.join(folder, "store.db"), synchronous="NORMAL")
        extra["grants"] = GrantIssuer(private_pem, ttl_s=60, clock=lambda: clock[0])
        verifier = GrantVerifier(
            public_pem, nonces=store, current_policy_version=lambda: checklist.policy.version, clock=lambda: clock[0]
        )
        executor = GuardedExecutor(
            {"issue_refund": lambda **kw: {"ok": True}}, verifier=verifier, ledger=store, effects={}
        )
    guard = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True, **extra)
    marks = sorted({0, args.calls // 4, args.calls // 2, args.calls})
    rows: list[tuple[int, float, int]] = []
    started = time.perf_counter()
    for i in range(args.calls + 1):
        if i in marks:
            gc.collect()
            rows.append((i, rss_mb(), len(guard.trace.events)))
        if i == args.calls:
            break
        call, trajectory = _case(i)
        decision = guard.check(call, from_trajectory(trajectory, "openai_chat") if args.lists else trajectory)
        assert decision.outcome == "allow", decision
        if executor is not None:
            clock[0] += 0.1  # 10 calls a simulated second: grants (60 s + 300 s margin) expire during the run
            result = executor.execute(call, decision.grant or "", principal=None, resource=None)
            assert result.executed, result
    elapsed = time.perf_counter() - started
    label = "default settings + grants" if args.grants else "default settings"
    label += ", Chat message lists" if args.lists else ""
    print(f"Guard.check with {label}: {args.calls:,} calls in {elapsed:.1f} s")
    print("    calls     RSS MB   trace events kept")
    for calls, rss, kept in rows:
        print(f"  {calls:7,d}   {rss:8.1f}   {kept:8d}")
    if executor is not None:
        purger = executor.verifier.purger
        print(f"spent nonces purged: {purger.purged:,} (last purge error: {purger.last_error})")
    (half, rss_half, _), (end, rss_end, _) = rows[-2], rows[-1]
    if end > half:
        print(
            f"growth over the second half: {(rss_end - rss_half) / (end - half) * 1000 * 1024:.1f} KB per 1,000 calls"
        )


if __name__ == "__main__":
    main()
