"""SQLiteStore vs PostgresStore on the full guarded-call path, with 1 and 16 threads.

Run: ``python benchmarks/bench_store.py [--n 2000] [--postgres URL] [--orders 1]``

Each call is ``GuardedExecutor.execute``: grant verification (Ed25519 signature
and claims), nonce consume, denial check, ledger claim under the refund ceiling,
the tool, ledger commit - everything a replica does per allowed call except the
gate and signing the grant, which do not touch the store (grants are issued before
the clock starts). Prints claims/s and per-call p50/p99 for each store and thread
count, and the ratios PostgreSQL/SQLite.

Stores: a SQLite file in WAL mode (``synchronous=FULL``, the default of
``open_store``) in a temp dir, and PostgreSQL at ``--postgres URL`` (else
``$POLICYGUARD_TEST_POSTGRES_URL``, else a throwaway local cluster started like
the tests do), each in a fresh schema. ``--orders K`` spreads the calls over K
orders; with 1 (the default) every claim contends for the same order's ceiling
lock, the worst case.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType

from bench_gate import CHECKLIST, VERSION, refund

from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import Store
from policyguard.enforcement.storeurl import open_store
from policyguard.trajectory.messages import ToolCall

ROOT = Path(__file__).resolve().parents[1]


def _pgserver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pgserver", ROOT / "tests" / "pgserver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def postgres_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with _pgserver().throwaway_cluster(durable=True) as started:
        yield started


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def run(store: Store, n: int, threads: int, orders: int) -> tuple[float, list[float], int]:
    """Execute n granted refunds over ``threads`` threads; (calls/s, per-call seconds, refused)."""
    for k in range(orders):
        store.set_captured(f"O{k}", 1e12)
    private_pem, public_pem = generate_keypair()
    issuer = GrantIssuer(private_pem, ttl_s=3600)
    verifier = GrantVerifier(public_pem, nonces=store, current_policy_version=lambda: VERSION)
    executor = GuardedExecutor({"issue_refund": refund}, verifier=verifier, ledger=store, checklist=CHECKLIST)
    calls = [
        ToolCall(
            id=f"c{i}",
            name="issue_refund",
            arguments={"order_id": f"O{i % orders}", "amount": 1, "idempotency_key": f"k{i}"},
        )
        for i in range(n)
    ]
    grants = [
        issuer.issue(c, principal="alice", resource=str(c.arguments["order_id"]), policy_version=VERSION) for c in calls
    ]
    samples: list[list[float]] = [[] for _ in range(threads)]
    refused = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        barrier.wait()
        for i in range(t, n, threads):
            start = time.perf_counter()
            result = executor.execute(
                calls[i], grants[i], principal="alice", resource=str(calls[i].arguments["order_id"])
            )
            samples[t].append(time.perf_counter() - start)
            if not result.executed:
                refused[t] += 1

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join(600)
    elapsed = time.perf_counter() - start
    return n / elapsed, sorted(s for part in samples for s in part), sum(refused)


DURABILITY = {
    "durable": "every commit flushed to disk (SQLite synchronous=FULL, PostgreSQL synchronous_commit=on)",
    "crash-safe": "survives a process crash, not power loss (SQLite NORMAL, PostgreSQL synchronous_commit=off)",
}


def measure(backend: str, durability: str, threads: int, n: int, orders: int, server: str, tmp: Path) -> float:
    """One line of the table; returns claims/s."""
    with ExitStack() as per_run:
        if backend == "sqlite":
            url = f"sqlite:///{tmp / f'bench-{durability}-{threads}.db'}"
            store = open_store(url, synchronous="FULL" if durability == "durable" else "NORMAL")
        else:
            url = per_run.enter_context(_pgserver().fresh_schema(server))
            if durability != "durable":
                url = url.replace("options=", "options=-csynchronous_commit%3Doff%20", 1)
            store = open_store(url)
        per_run.callback(store.close)
        rate, ordered, refused = run(store, n, threads, orders)
        entries = len(store.entries())
    p50, p99 = percentile(ordered, 0.5) * 1e3, percentile(ordered, 0.99) * 1e3
    print(
        f"  {backend:<8} {threads:>2} thread(s): {rate:8.0f} claims/s   p50 {p50:7.2f} ms   "
        f"p99 {p99:7.2f} ms   refused {refused}   ledger entries {entries}"
    )
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--postgres", default=os.environ.get("POLICYGUARD_TEST_POSTGRES_URL"), help="server URL")
    parser.add_argument("--orders", type=int, default=1, help="spread the calls over this many orders")
    args = parser.parse_args()
    if args.n < 16 or args.orders < 1:
        parser.error("--n must be at least 16 and --orders at least 1")
    rates: dict[tuple[str, str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        server = stack.enter_context(postgres_server(args.postgres))
        print(f"full guarded call (verify + nonce + claim + tool + commit), n={args.n}, orders={args.orders}")
        for durability in DURABILITY:
            print(f" {durability}: {DURABILITY[durability]}")
            for threads in (1, 16):
                for backend in ("sqlite", "postgres"):
                    rate = measure(backend, durability, threads, args.n, args.orders, server, Path(tmp))
                    rates[durability, backend, threads] = rate
        for durability in DURABILITY:
            for threads in (1, 16):
                ratio = rates[durability, "postgres", threads] / rates[durability, "sqlite", threads]
                print(f"  PostgreSQL/SQLite throughput, {durability}, {threads:>2} thread(s): {ratio:.2f}")
        print(f"  load average while measuring: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
