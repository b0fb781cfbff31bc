"""How much the deterministic path costs per guarded call, and what limits it.

Run: ``python benchmarks/bench_gate.py [--n 3000] [--dir DIR]``. Prints

(a) the hard gate alone (``HardGate.check`` on a refund with two CEL checks
    over a trusted ``get_order`` result) - target p50 <= 50 us;
(b) the whole guarded call on one core: gate + grant issue + executor
    (verify, nonce consume, ledger claim, tool, ledger commit) on a SQLite
    file in WAL mode, for ``synchronous=FULL`` and ``NORMAL`` - target
    >= 5,000 calls/s;
(c) the bare tool call, for scale;

and each step of (b) timed separately (sign, verify, nonce insert, ledger
claim, ledger commit, a raw fsync) so the bottleneck is named, not guessed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

POLICY = "Refund only delivered orders, never more than was captured and not yet refunded."
VERSION = "sha256:" + "1" * 64

CHECKLIST = Checklist.model_validate(
    {
        "policy": {"name": "refunds", "version": VERSION},
        "facts": {"order": {"tool": "get_order", "match": {"order_id": "args.order_id"}}},
        "tools": {
            "get_order": {"mutating": False},
            "issue_refund": {
                "effect": {"transaction_arg": "order_id", "resource_arg": "order_id"},
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
                        "text": "Never refund more than was captured and not yet refunded.",
                        "kind": "data",
                        "source": "never more than was captured and not yet refunded",
                        "prerequisites": ["get_order"],
                        "check": "args.amount <= facts.order.captured - facts.order.refunded",
                    },
                ],
            },
        },
    }
)

TRAJECTORY = Trajectory(
    messages=[
        Message(role="user", content="Please refund 50 USD on order O1."),
        Message(role="assistant", tool_calls=[ToolCall(id="r1", name="get_order", arguments={"order_id": "O1"})]),
        Message(
            role="tool",
            tool_call_id="r1",
            content='{"order_id": "O1", "status": "delivered", "captured": 1000000, "refunded": 0}',
        ),
    ]
)

CONTEXT = CheckContext(
    checklist=CHECKLIST, policy_text=POLICY, now=datetime(2026, 11, 30, tzinfo=timezone.utc), principal="alice"
)


def refund(order_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
    return {"status": "issued", "order_id": order_id, "amount": amount}


def call_for(i: int) -> ToolCall:
    return ToolCall(
        id=f"c{i}", name="issue_refund", arguments={"order_id": "O1", "amount": 1, "idempotency_key": f"k{i}"}
    )


def timed(n: int, step: Callable[[int], object]) -> list[float]:
    """Per-call seconds of ``step(i)`` for i in range(n)."""
    out: list[float] = []
    clock = time.perf_counter
    for i in range(n):
        start = clock()
        step(i)
        out.append(clock() - start)
    return out


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2] * 1e6
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6
    mean = statistics.fmean(samples) * 1e6
    return f"  {label:<34} p50 {p50:9.1f} us   p99 {p99:9.1f} us   mean {mean:9.1f} us"


def bench_gate(n: int) -> list[float]:
    gate = HardGate(CHECKLIST)
    calls = [call_for(i) for i in range(n)]
    decision = gate.check(calls[0], TRAJECTORY, CONTEXT)
    assert decision.outcome == "escalate", decision  # both checks MET; the rest is the verifier's
    timed(min(200, n), lambda i: gate.check(calls[i], TRAJECTORY, CONTEXT))
    return timed(n, lambda i: gate.check(calls[i], TRAJECTORY, CONTEXT))


def bench_pipeline(
    n: int, directory: Path, synchronous: str, *, with_gate: bool = True
) -> tuple[float, list[float], int]:
    """Gate + issue + execute per call on a fresh WAL file; returns (calls/s, per-call s, ledger size)."""
    path = directory / f"pipeline-{synchronous}-{with_gate}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = SQLiteStore(str(path), synchronous=synchronous)  # type: ignore[arg-type]
    store.set_captured("O1", 1e12)
    private_pem, public_pem = generate_keypair()
    issuer = GrantIssuer(private_pem)
    verifier = GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: VERSION)
    executor = GuardedExecutor({"issue_refund": refund}, verifier=verifier, ledger=store, checklist=CHECKLIST)
    gate = HardGate(CHECKLIST)
    calls = [call_for(i) for i in range(n)]

    def guarded(i: int) -> None:
        call = calls[i]
        if with_gate and gate.check(call, TRAJECTORY, CONTEXT).outcome == "block":
            raise AssertionError("gate blocked a compliant call")
        grant = issuer.issue(call, principal="alice", resource="O1", policy_version=VERSION)
        if not executor.execute(call, grant, principal="alice", resource="O1").executed:
            raise AssertionError("executor refused a granted call")

    start = time.perf_counter()
    samples = timed(n, guarded)
    elapsed = time.perf_counter() - start
    size = len(store.entries())
    store.close()
    return n / elapsed, samples, size


def bench_steps(n: int, directory: Path, synchronous: str) -> dict[str, list[float]]:
    """Each step of the guarded call on its own."""
    path = directory / f"steps-{synchronous}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = SQLiteStore(str(path), synchronous=synchronous)  # type: ignore[arg-type]
    private_pem, public_pem = generate_keypair()
    issuer = GrantIssuer(private_pem)
    verifier = GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: VERSION)
    calls = [call_for(i) for i in range(n)]
    tokens: list[str] = []
    steps: dict[str, list[float]] = {}
    steps["args_sha256 (canonical JSON)"] = timed(n, lambda i: calls[i].args_sha256)
    steps["grant sign (issue)"] = timed(
        n, lambda i: tokens.append(issuer.issue(calls[i], principal="alice", resource="O1", policy_version=VERSION))
    )
    steps["grant verify (signature+claims)"] = timed(n, lambda i: verifier.decode(tokens[i]))
    steps["nonce insert (1 txn)"] = timed(n, lambda i: store.consume(f"n{i}", 1e12))
    steps["is_denied read"] = timed(n, lambda i: store.is_denied(f"c{i}"))
    steps["ledger claim (1 txn)"] = timed(
        n,
        lambda i: store.begin_effect(
            f"k{i}",
            tool="issue_refund",
            transaction_id="O1",
            amount=1,
            currency=None,
            args_sha256="a" * 64,
            enforce_captured=False,
        ),
    )
    steps["ledger commit (1 txn)"] = timed(n, lambda i: store.complete_effect(f"k{i}", '{"status": "issued"}'))
    store.close()
    return steps


def bench_fsync(n: int, directory: Path) -> list[float]:
    path = directory / "fsync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:

        def step(i: int) -> None:
            os.write(fd, b"x" * 128)
            os.fsync(fd)

        return timed(n, step)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per measurement")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go (default: a temp dir)")
    args = parser.parse_args()
    n = args.n
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        print(f"PolicyGuard guarded-call benchmark, n={n} per figure, one thread, files in {directory}")

        gate = bench_gate(n)
        print("\n(a) hard gate only (2 CEL checks, 1 trusted fact)")
        print(summary("HardGate.check", gate))
        gate_p50 = sorted(gate)[n // 2] * 1e6
        print(f"  target p50 <= 50 us: {'met' if gate_p50 <= 50 else 'NOT met'} ({gate_p50:.1f} us)")

        bare = timed(n, lambda i: refund("O1", 1, f"k{i}"))
        print("\n(c) bare tool call")
        print(summary("refund(**args)", bare))

        print("\n(b) gate + grant issue + verify + nonce + ledger claim + tool + ledger commit, SQLite WAL")
        rates: dict[str, float] = {}
        p50s: dict[str, float] = {}
        for synchronous in ("FULL", "NORMAL"):
            for with_gate in (True, False):
                rate, samples, size = bench_pipeline(n, directory, synchronous, with_gate=with_gate)
                label = f"{'guarded call' if with_gate else 'grant+executor only'}, {synchronous}"
                rates[label] = rate
                p50s[label] = sorted(samples)[n // 2]
                assert size == n, f"ledger has {size} entries, expected {n}"
                print(summary(label, samples))
                verdict = "met" if rate >= 5000 else "NOT met"
                print(f"  {'':<34} {rate:9.0f} calls/s (target >= 5,000: {verdict}); ledger entries {size}")
        full, normal = rates["guarded call, FULL"], rates["guarded call, NORMAL"]
        print(f"  throughput ratio FULL/NORMAL (guarded call): {full / normal:.2f}")

        print("\nwhat limits (b): each step alone")
        for synchronous in ("FULL", "NORMAL"):
            steps = bench_steps(n, directory, synchronous)
            print(f" synchronous={synchronous}")
            for label, samples in steps.items():
                print(summary(label, samples))
        print(summary("raw write+fsync on this disk", bench_fsync(min(n, 500), directory)))
        bare_p50 = sorted(bare)[n // 2]
        print(f"\n guarded call p50 / bare call p50 (NORMAL): {p50s['guarded call, NORMAL'] / bare_p50:,.0f}x")
        print(f" load average while measuring: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
