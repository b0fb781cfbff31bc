"""An honest check that needs the isolated tier, alone and beside 8 over-budget decisions looping on the pool.

Run: ``python benchmarks/bench_cel_pool.py [--n 200] [--hostile 8] [--workers W] [--queue Q] [--json]``
(no network, no model, no extra).

One hard gate (:class:`~policyguard.gate.hardgate.HardGate`) over a one-requirement checklist,
``args.seats.all(s, !(s in args.taken))``, decides in this process:

* the honest call: 300 seats against 300 taken ones. Its estimate is over the in-process budget
  (:data:`~policyguard.gate.celcost.DECISION_BUDGET`) and under
  :data:`~policyguard.gate.celprocess.LARGE_STEPS`, so it is evaluated in the worker pool and is
  answered in milliseconds there (the benchmark checks both before it times anything);
* the over-budget call: 6,000 against 6,000, seconds of engine time, so the pool kills its worker
  at the decision's :data:`~policyguard.gate.celcost.ISOLATED_SECONDS` and restarts the slot.

``--n`` honest decisions, one after another from one thread, are timed twice: with nothing else
running (idle), and while ``--hostile`` threads decide the over-budget call in a loop (each a
block: killed past its time, timed out waiting for a worker, or refused at once by the full queue).
Printed: p50 and p99 of both phases and their ratio (the target is p99 <= 2x idle), the
over-budget decisions by reason, the pool's settings, and the core count. Every figure depends
on the free cores: the killed worker's restart and the gate's own estimate walks take CPU too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

CHECK = "args.seats.all(s, !(s in args.taken))"
CHECKLIST = f"""
schema_version: 1
policy: {{name: seats, version: "sha256:{"0" * 64}"}}
tools:
  assign_seats:
    mutating: true
    requirements:
      - id: seats-free
        text: No seat to assign is taken already.
        kind: data
        source: "Never assign a seat that is taken."
        check: '{CHECK}'
"""
HONEST = 300
HOSTILE = 6_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    """The gate, its context and the two calls."""

    def __init__(self, directory: Path) -> None:
        from policyguard.checklist.schema import load_checklist
        from policyguard.gate.hardgate import HardGate
        from policyguard.stages import CheckContext

        path = directory / "checklist.yaml"
        path.write_text(CHECKLIST, encoding="utf-8")
        self.checklist = load_checklist(path)
        self.gate = HardGate(self.checklist)
        self.context = CheckContext(checklist=self.checklist, policy_text="", now=datetime.now(timezone.utc))
        self.honest = self._call("h", HONEST)
        self.hostile = self._call("x", HOSTILE)

    def _call(self, prefix: str, n: int) -> tuple[Any, Any]:
        from policyguard.trajectory.messages import Message, ToolCall, Trajectory

        args = {"seats": [f"{prefix}{k}" for k in range(n)], "taken": [f"t{k}" for k in range(n)]}
        call = ToolCall(id=f"{prefix}-call", name="assign_seats", arguments=args)
        return call, Trajectory(messages=[Message(role="user", content="Seats, please."),
                                          Message(role="assistant", tool_calls=[call])])  # fmt: skip

    def decide(self, which: tuple[Any, Any]) -> Any:
        call, trajectory = which
        return self.gate.check(call, trajectory, self.context)


def honest_goes_apart(bench: Bench) -> int:
    """The honest call's estimate, after checking that it is evaluated in the pool and allowed (escalate)."""
    from policyguard.gate import celprocess

    costs: list[int] = []
    evaluate = celprocess.evaluate

    def counted(source: str, variables: Any, timeout_s: float, cost: int = 0) -> Any:
        costs.append(cost)
        return evaluate(source, variables, timeout_s, cost)

    celprocess.evaluate = counted  # type: ignore[assignment]
    try:
        decision = bench.decide(bench.honest)
    finally:
        celprocess.evaluate = evaluate  # type: ignore[assignment]
    if decision.outcome != "escalate" or len(costs) != 1 or not 0 < costs[0] <= celprocess.LARGE_STEPS:
        raise SystemExit(f"the honest call did not pass through the pool as a small check: {decision}, {costs}")
    return costs[0]


def warm(workers: int) -> None:
    """Start every worker of the pool: ``workers`` checks at once, each starting a slot (a start takes ~0.1 s)."""
    from policyguard.gate import celprocess

    threads = [threading.Thread(target=celprocess.evaluate, args=("true", {}, 60.0)) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def timed(bench: Bench, n: int) -> list[float]:
    latencies = []
    for _ in range(n):
        started = time.perf_counter()
        decision = bench.decide(bench.honest)
        latencies.append(time.perf_counter() - started)
        if decision.outcome != "escalate":
            raise SystemExit(f"an honest decision was not passed: {decision.error or decision.message}")
        time.sleep(0.005)
    return latencies


def reason(decision: Any) -> str:
    text = decision.error or decision.message or ""
    for words, label in (("places waiting for a worker", "refused at once (queue full)"),
                         ("no worker process was free", "timed out waiting for a worker"),
                         ("still running after", "killed past its time")):  # fmt: skip
        if words in text:
            return label
    return f"{decision.outcome}: {text[:80]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="honest decisions per phase (default 200)")
    parser.add_argument("--hostile", type=int, default=8, help="threads looping over-budget decisions (default 8)")
    parser.add_argument("--workers", type=int, default=None, help="pool workers (default: the pool's, the core count)")
    parser.add_argument("--queue", type=int, default=None, help="pool queue (default: the pool's, 4 per worker)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    from policyguard.gate import celprocess

    settings = celprocess.configure(args.workers, args.queue)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        warm(settings.workers)  # every worker started: cold starts are not what this times
        cost = honest_goes_apart(bench)
        idle = timed(bench, args.n)
        stop = threading.Event()
        seen: Counter[str] = Counter()

        def flood() -> None:
            while not stop.is_set():
                seen[reason(bench.decide(bench.hostile))] += 1

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(args.hostile)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)  # the flood holds the pool before the honest decisions start
        loaded = timed(bench, args.n)
        stop.set()
        for thread in threads:
            thread.join(30)
        time.sleep(1.5)  # a killed worker's restart finishes before the pool is closed
        celprocess.configure()  # stops the workers
    ms = 1000.0
    result: dict[str, Any] = {
        "cores": os.cpu_count(),
        "workers": settings.workers,
        "queue": settings.queue,
        "honest_estimate_steps": cost,
        "idle_p50_ms": round(statistics.median(idle) * ms, 1),
        "idle_p99_ms": round(percentile(idle, 0.99) * ms, 1),
        "flood_p50_ms": round(statistics.median(loaded) * ms, 1),
        "flood_p99_ms": round(percentile(loaded, 0.99) * ms, 1),
        "over_budget": dict(seen),
    }
    result["p50_ratio"] = round(result["flood_p50_ms"] / result["idle_p50_ms"], 2)
    result["p99_ratio"] = round(result["flood_p99_ms"] / result["idle_p99_ms"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"pool: {settings.workers} workers, queue {settings.queue}; {os.cpu_count()} cores (shared); honest check "
          f"estimated at {cost:,} steps (evaluated apart), {args.n} decisions per phase")  # fmt: skip
    print(f"  idle                      p50 {result['idle_p50_ms']:7.1f} ms  p99 {result['idle_p99_ms']:7.1f} ms")
    print(f"  {args.hostile} over-budget in a loop  p50 {result['flood_p50_ms']:7.1f} ms  "
          f"p99 {result['flood_p99_ms']:7.1f} ms")  # fmt: skip
    print(f"  ratio                     p50 x{result['p50_ratio']:.2f}  p99 x{result['p99_ratio']:.2f}")
    print("  over-budget decisions: " + ", ".join(f"{k}: {v}" for k, v in sorted(seen.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
