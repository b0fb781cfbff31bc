"""Guarded calls per second on one core, beside the Ed25519 ceiling that bounds them.

Run: ``python benchmarks/bench_guarded_call.py [--n 4000] [--runs 3] [--threads 16] [--dir DIR] [--all-cores]``

A guarded call is the whole deterministic path of one refund: hard gate decision
(2 CEL checks over a trusted ``get_order`` result) + grant sign + grant verify +
nonce spend + deny read + ledger claim (durable before the tool runs) + tool +
ledger completion, on a SQLite file in WAL mode. Printed, each the median of
``--runs`` runs in this one process (so the ratios hold even on a noisy machine):

* calls/s for 1 sequential caller and for ``--threads`` concurrent callers,
  under ``synchronous=FULL`` (fsync per commit) and ``NORMAL``, for the
  store modes ``plain`` (a transaction per write), ``group`` (group commit) and
  ``deferred`` (group commit, completion rides in the next batch);
* the Ed25519-only ceiling: raw sign + verify per second with the binding in
  use, and the same through the grant codec (JWS encode + decode);
* CPU per call (all threads) and the share of it that is the signature pair,
  which a loaded machine distorts far less than wall-clock rates.

Targets (issue 12): >= 5,000 calls/s with 16 callers under FULL on one core;
>= 1,500 calls/s for one sequential caller under FULL. The process is pinned to
one CPU unless ``--all-cores``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

# The same refund workload as bench_gate.py (checklist, trusted get_order result, context, tool).
from bench_gate import CHECKLIST, CONTEXT, TRAJECTORY, VERSION, refund  # noqa: E402

from policyguard.enforcement import jws
from policyguard.enforcement.executor import GuardedExecutor
from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.gate.hardgate import HardGate
from policyguard.trajectory.messages import ToolCall

KEYS = generate_keypair()


def guarded_calls(n: int, threads: int, path: Path, synchronous: str, mode: str) -> tuple[float, float, int]:
    """(calls/s, CPU us per call, refusals) of ``n`` guarded calls over ``threads`` callers on a warm database file.

    A refusal is a call the store could not serve in time (``inconclusive``:
    "database is locked" after the busy timeout); it did not run and is not
    counted in calls/s. Every call that ran must have exactly one committed
    ledger entry.

    A warm-up of ``n // 2`` calls first cycles the WAL a few times: a gateway's
    store runs for days, and a fresh file's first commits also pay for growing it.
    """
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = SQLiteStore(
        str(path),
        synchronous=synchronous,  # type: ignore[arg-type]
        group_commit=mode != "plain",
        defer_completion=mode == "deferred",
    )
    store.set_captured("O1", 1e12)
    issuer = GrantIssuer(KEYS[0])
    verifier = GrantVerifier(KEYS[1], nonces=store, current_policy_version=lambda: VERSION)
    executor = GuardedExecutor({"issue_refund": refund}, verifier=verifier, ledger=store, checklist=CHECKLIST)
    gate = HardGate(CHECKLIST)
    warm = n // 2
    calls = [
        ToolCall(id=f"c{i}", name="issue_refund", arguments={"order_id": "O1", "amount": 1, "idempotency_key": f"k{i}"})
        for i in range(warm + n)
    ]
    failures: list[str] = []

    def caller(mine: list[ToolCall]) -> None:
        for call in mine:
            if gate.check(call, TRAJECTORY, CONTEXT).outcome == "block":
                failures.append(f"gate blocked {call.id}")
                return
            grant = issuer.issue(call, principal="alice", resource="O1", policy_version=VERSION)
            result = executor.execute(call, grant, principal="alice", resource="O1")
            if not result.executed:
                failures.append(f"{call.id}: {result.reason} {result.error}")

    def run(batch: list[ToolCall]) -> None:
        workers = [threading.Thread(target=caller, args=(batch[t::threads],)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    run(calls[:warm])
    warm_failures = len(failures)
    cpu, start = time.process_time(), time.perf_counter()
    run(calls[warm:])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    committed = [e for e in store.entries() if e.status == "committed"]
    store.close()
    if any("inconclusive" not in f for f in failures) or len(committed) != warm + n - len(failures):
        raise AssertionError(f"not every call ran exactly once: {failures[:3]}, {len(committed)} ledger entries")
    refused = len(failures) - warm_failures
    return (n - refused) / elapsed, cpu / n * 1e6, refused


def per_second(n: int, step: Callable[[int], object]) -> tuple[float, float]:
    """(runs per wall-clock second, CPU us per run) of ``step(i)`` for i in range(n)."""
    cpu, start = time.process_time(), time.perf_counter()
    for i in range(n):
        step(i)
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6


def ed25519_ceiling(n: int) -> dict[str, tuple[float, float]]:
    """Sign + verify: raw with the binding in use, and through the grant codec; plus the gate alone."""
    sign, verify = jws.signer(KEYS[0]), jws.verifier(KEYS[1])
    message = b"x" * 420  # the size of a grant's signing input
    claims = {"call_id": "c1", "tool": "issue_refund", "args_sha256": "a" * 64, "nonce": "b" * 32, "exp": 1}
    gate = HardGate(CHECKLIST)
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 1, "idempotency_key": "k"})

    def raw(i: int) -> None:
        if not verify(sign(message), message):
            raise AssertionError("signature did not verify")

    return {
        "raw": per_second(n, raw),
        "codec": per_second(n, lambda i: jws.decode(jws.encode(claims, sign), verify)),
        "gate": per_second(n, lambda i: gate.check(call, TRAJECTORY, CONTEXT)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="guarded calls per measurement")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is printed")
    parser.add_argument("--threads", type=int, default=16, help="concurrent callers")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go (default: a temp dir)")
    parser.add_argument("--all-cores", action="store_true", help="do not pin the process to one CPU")
    args = parser.parse_args()
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    print(
        f"guarded call = gate + sign + verify + nonce + deny read + claim + tool + completion; "
        f"n={args.n}, median of {args.runs} runs, {cpus} CPU(s) for this process, Ed25519 via {jws.available_backend()}"
    )
    configs = [
        (synchronous, mode, threads)
        for synchronous in ("FULL", "NORMAL")
        for mode in ("plain", "group", "deferred")
        for threads in (1, args.threads)
    ]
    samples: dict[tuple[str, str, int], list[tuple[float, float, int]]] = {c: [] for c in configs}
    ceilings: dict[str, list[tuple[float, float]]] = {"raw": [], "codec": [], "gate": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for _ in range(args.runs):  # interleaved, so drifting load hits every figure alike
            for kind, figures in ed25519_ceiling(args.n).items():
                ceilings[kind].append(figures)
            for synchronous, mode, threads in configs:
                path = Path(tmp) / "bench.db"
                samples[(synchronous, mode, threads)].append(guarded_calls(args.n, threads, path, synchronous, mode))
    raw, raw_cpu = (statistics.median(f[i] for f in ceilings["raw"]) for i in (0, 1))
    codec, codec_cpu = (statistics.median(f[i] for f in ceilings["codec"]) for i in (0, 1))
    gate_cpu = statistics.median(f[1] for f in ceilings["gate"])
    print(
        f"\nEd25519-only ceiling ({jws.available_backend()}): sign+verify {raw:,.0f}/s wall, {raw_cpu:.0f} us CPU "
        f"= {1e6 / raw_cpu:,.0f}/s per core; as JWS {codec:,.0f}/s wall, {codec_cpu:.0f} us CPU"
    )
    print(f"hard gate alone (part of every guarded call): {gate_cpu:.0f} us CPU per decision")
    print(
        f"\n{'synchronous':<12}{'store mode':<10}{'callers':>8}{'calls/s':>9}{'CPU us/call':>12}"
        f"{'per core':>10}{'of Ed25519':>11}  target (calls/s)"
    )
    for synchronous, mode, threads in configs:
        rate = statistics.median(r for r, _, _ in samples[(synchronous, mode, threads)])
        cpu = statistics.median(c for _, c, _ in samples[(synchronous, mode, threads)])
        refused = sum(f for _, _, f in samples[(synchronous, mode, threads)])
        target = ""
        if synchronous == "FULL" and threads == 1:
            target = f">= 1,500: {'met' if rate >= 1500 else 'NOT met'}"
        elif synchronous == "FULL":
            target = f">= 5,000: {'met' if rate >= 5000 else 'NOT met'}"
        print(
            f"{synchronous:<12}{mode:<10}{threads:>8}{rate:>9,.0f}{cpu:>12,.0f}{1e6 / cpu:>10,.0f}"
            f"{raw_cpu / cpu:>11.0%}  {target}" + (f" ({refused} refused: store busy)" if refused else "")
        )
    print(
        "\ncalls/s: wall clock; per core: 1e6 / CPU us per call, what one core would sustain if nothing else ran "
        "and the fsync waits overlapped; of Ed25519: the share of a call's CPU that is the signature pair"
    )
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    print(f"\nload average before {load_before}, after {load_after} (the machine is shared)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
