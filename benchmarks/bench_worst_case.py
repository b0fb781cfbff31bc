"""Worst-case requests for the shipped checklists against a real ``policyguard serve``: does the server stay up?

Run: ``python benchmarks/bench_worst_case.py [--decision-timeout 2] [--json]`` (needs the ``serve`` extra and
tau2's policies; no network, no model).

For each shipped checklist (airline, retail) the requests aim at its costliest
checks, quadratic in a list of the call:

* ``limit``: the list as long as :data:`policyguard.trajectory.limits.MAX_NODES` allows
  and the 1,000,000 characters of a call's arguments allow (``items-in-order``
  over 49,990 item ids; ``flights-distinct`` over 19,000 flights), the case
  that froze the server for minutes;
* ``apart``: a list sized so the check's estimate lands between the in-process
  budget and the hard limit (:mod:`policyguard.gate.celcost`), so it runs in the
  killable worker process.

While each request is decided, ``/healthz`` of the same server is polled every
50 ms. Printed per request: HTTP status, outcome, the time to the answer, and
the slowest ``/healthz``. The bounds (``tests/serve/test_worst_case.py``):
``/healthz`` within 1 s, and a block or a 503 within the decision timeout + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT_ITEMS = 49_990  # item_ids + new_item_ids + order_id: 2 n + 3 values <= MAX_NODES
LIMIT_FLIGHTS = 19_000  # the arguments' JSON text stays under the 1,000,000 characters of a readable call


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def retail_request(n: int, order_items: int = 5) -> dict[str, Any]:
    """modify_pending_order_items over ``n`` item ids, after reading an order of ``order_items`` items."""
    order = {
        "order_id": "#W1",
        "user_id": "u1",
        "status": "pending",
        "items": [{"item_id": str(k), "product_id": "p1", "price": 1.0} for k in range(order_items)],
    }
    ids = [str(k) for k in range(n)]
    args = {"order_id": "#W1", "item_ids": ids, "new_item_ids": ids, "payment_method_id": "gift_card_1"}
    trajectory = [
        {"role": "user", "content": "Change the items of order #W1."},
        {"role": "assistant", "content": None, "tool_calls": [_call("r1", "get_order_details", {"order_id": "#W1"})]},
        {"role": "tool", "tool_call_id": "r1", "content": json.dumps(order)},
    ]
    return {"trajectory": trajectory, "call": _call("w1", "modify_pending_order_items", args)}


def airline_request(n: int) -> dict[str, Any]:
    """update_reservation_flights with ``n`` flights (flights-distinct compares each with each)."""
    reservation = {"reservation_id": "R1", "user_id": "u1", "cabin": "economy", "flights": [], "status": None}
    flights = [{"flight_number": f"HAT{k}", "date": "2024-05-20"} for k in range(n)]
    args = {"reservation_id": "R1", "cabin": "economy", "flights": flights, "payment_id": "gift_card_1"}
    trajectory = [
        {"role": "user", "content": "Change the flights of R1."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("r1", "get_reservation_details", {"reservation_id": "R1"})],
        },
        {"role": "tool", "tool_call_id": "r1", "content": json.dumps(reservation)},
    ]
    return {"trajectory": trajectory, "call": _call("w1", "update_reservation_flights", args)}


CASES = {
    "airline": {"limit": lambda: airline_request(LIMIT_FLIGHTS), "apart": lambda: airline_request(600)},
    "retail": {"limit": lambda: retail_request(LIMIT_ITEMS), "apart": lambda: retail_request(500, 500)},
}


def _policy(domain: str) -> Path:
    import tau2

    return Path(tau2.__file__).parent / "data" / "tau2" / "domains" / domain / "policy.md"


def start(domain: str, decision_timeout: float) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "policyguard", "serve", "--policy", str(_policy(domain)),
         "--checklist", str(ROOT / "checklists" / f"{domain}.yaml"), "--port", "0", "--log-level", "warning",
         "--decision-timeout", str(decision_timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if "listening on " in line:
            return process, line.split("listening on ", 1)[1].split()[0]
    process.kill()
    raise SystemExit(f"bench_worst_case: policyguard serve --checklist {domain} did not start")


def measure(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One decision, with /healthz polled every 50 ms while it runs."""
    import httpx

    data = json.dumps(body).encode()
    done = threading.Event()
    health: list[float] = []

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get("/healthz").raise_for_status()
                health.append(time.perf_counter() - started)
                done.wait(0.05)

    poller = threading.Thread(target=poll)
    with httpx.Client(base_url=url, timeout=600) as client:
        client.get("/healthz").raise_for_status()
        poller.start()
        started = time.perf_counter()
        response = client.post("/v1/check", content=data, headers={"content-type": "application/json"})
        elapsed = time.perf_counter() - started
    done.set()
    poller.join()
    answer = response.json()
    return {
        "status": response.status_code,
        "outcome": answer.get("outcome"),
        "reason": (answer.get("error") or answer.get("message") or "")[:160],
        "body_bytes": len(data),
        "decision_s": round(elapsed, 3),
        "healthz_max_s": round(max(health, default=0.0), 3),
        "healthz_polls": len(health),
    }


def run(decision_timeout: float = 2.0) -> dict[str, dict[str, dict[str, Any]]]:
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for domain, cases in CASES.items():
        process, url = start(domain, decision_timeout)
        try:
            figures[domain] = {name: measure(url, build()) for name, build in cases.items()}
        finally:
            process.kill()
            process.wait(10)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decision-timeout", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args.decision_timeout)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"serve --decision-timeout {args.decision_timeout:g}; bounds: healthz <= 1 s, answer <= timeout + 1 s")
    for domain, cases in figures.items():
        for name, f in cases.items():
            print(
                f"{domain:8} {name:6} {f['body_bytes'] / 1024:7.0f} KB  {f['status']} {f['outcome'] or '-':8}"
                f" answer {f['decision_s']:6.2f} s  healthz max {f['healthz_max_s']:5.2f} s"
                f" ({f['healthz_polls']} polls)  {f['reason'][:90]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
