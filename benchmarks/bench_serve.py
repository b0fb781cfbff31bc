"""Decisions per second and latency of ``policyguard serve`` through HTTP, with 1 and 2 replicas.

Run: ``python benchmarks/bench_serve.py [--n 2000] [--clients 16] [--store URL ...]`` (needs the
``serve`` and ``tau2`` extras). Each request is ``POST /v1/check`` with a 20-message airline
dialogue (OpenAI Chat JSON; the tool results are the tau2 airline records) and a pending
``cancel_reservation`` the gate allows (``--model none``: gate only), so every answer is an
allow with a signed grant and one deny-store read. The replicas are real
``python -m policyguard serve`` processes sharing one store; the client is one asyncio
process with ``--clients`` connections, spread round-robin over the replicas. Prints
decisions/s, p50/p99 latency per configuration and the ratio 2 replicas / 1 replica.
The figures depend on the cores: the client and the replicas share this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def airline_dir() -> Path:
    import tau2

    return Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "airline"


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def dialogue() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """20 messages ending in the pending call: a business-class cancellation the gate allows.

    The policy text is the guard's; it is not repeated in the dialogue as a system message.
    """
    db = json.loads((airline_dir() / "db.json").read_text(encoding="utf-8"))
    reservation = db["reservations"]["4WQ150"]
    user = db["users"][reservation["user_id"]]
    rid, uid = reservation["reservation_id"], reservation["user_id"]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Hi, I'm {uid}. I need to cancel a trip."},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "get_user_details", {"user_id": uid})]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(user)},
        {"role": "assistant", "content": "I found your profile. Which reservation would you like to cancel?"},
        {"role": "user", "content": f"Reservation {rid}."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("call_2", "get_reservation_details", {"reservation_id": rid})],
        },  # fmt: skip
        {"role": "tool", "tool_call_id": "call_2", "content": json.dumps(reservation)},
    ]
    small_talk = [
        ("assistant", f"Reservation {rid} is a business-class trip. May I ask why you want to cancel?"),
        ("user", "My plans changed, I can no longer travel on those dates."),
        ("assistant", "Understood. A business-class reservation can be cancelled with a full refund."),
        ("user", "How long does the refund take?"),
        ("assistant", "Refunds are processed within 5 to 7 business days."),
        ("user", "OK. And all flights in the reservation are cancelled?"),
        ("assistant", "Yes, all flight segments of the reservation will be cancelled."),
        ("user", "Fine."),
        ("assistant", "Is there anything else about the reservation before I cancel it?"),
        ("user", "No, that's all."),
        ("assistant", f"To confirm: cancel reservation {rid} because your plans changed. Shall I proceed (yes/no)?"),
        ("user", "Yes, please cancel it."),
    ]
    messages += [{"role": role, "content": text} for role, text in small_talk]
    call = _call("pending", "cancel_reservation", {"reservation_id": rid})
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    assert len(messages) == 20, len(messages)
    return messages, call


def start(name: str, store: str, key: Path, trace: Path) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "policyguard", "serve", "--policy", str(airline_dir() / "policy.md"),
         "--checklist", str(ROOT / "checklists" / "airline.yaml"), "--store", store, "--grant-key", str(key),
         "--port", "0", "--replica", name, "--log-level", "warning", "--trace", str(trace)],
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
    raise SystemExit(f"replica {name} did not start")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process so far (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(urls: list[str], n: int, clients: int, body: dict[str, Any]) -> tuple[float, list[float]]:
    import httpx

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    latencies: list[float] = []

    async def client(index: int) -> None:
        url = urls[index % len(urls)]
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                payload = dict(body)
                payload["call"] = {**body["call"], "id": f"pending-{i}-{time.monotonic_ns()}"}
                payload["trajectory"] = body["trajectory"][:-1] + [
                    {"role": "assistant", "content": None, "tool_calls": [payload["call"]]}
                ]
                started = time.perf_counter()
                response = await http.post("/v1/check", json=payload)
                latencies.append(time.perf_counter() - started)
                decision = response.json()
                if response.status_code != 200 or decision.get("outcome") != "allow" or "grant" not in decision:
                    raise SystemExit(f"unexpected answer {response.status_code}: {str(decision)[:300]}")

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return n / (time.perf_counter() - started), latencies


def run(replicas: int, store: str, n: int, clients: int, directory: Path) -> tuple[float, float, float, str]:
    from policyguard.grants import generate_keypair

    key = directory / "grant.pem"
    if not key.exists():
        key.write_bytes(generate_keypair()[0])
    trajectory, call = dialogue()
    body = {"trajectory": trajectory, "call": call, "principal": "chen_jackson_3290"}
    processes = [start(f"r{i}", store, key, directory / f"trace-{replicas}-{i}.jsonl") for i in range(replicas)]
    try:
        urls = [url for _, url in processes]
        asyncio.run(load(urls, min(200, n), clients, body))  # warm-up: imports, CEL compilation, connections
        server_before = [cpu_seconds(p.pid) for p, _ in processes]
        client_before = time.process_time()
        rate, latencies = asyncio.run(load(urls, n, clients, body))
        client_cpu = time.process_time() - client_before
        server_after = [cpu_seconds(p.pid) for p, _ in processes]
    finally:
        for process, _ in processes:
            process.terminate()
            process.wait(timeout=30)
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    cpu = f"client CPU {client_cpu / n * 1000:5.2f} ms/decision"
    if all(v is not None for v in server_before + server_after):
        server = sum(a - b for a, b in zip(server_after, server_before, strict=True))  # type: ignore[operator]
        cpu = f"server CPU {server / n * 1000:5.2f} ms/decision, " + cpu
    return rate, p50, p99, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="requests per configuration (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent client connections (default 16)")
    parser.add_argument(
        "--store", action="append", default=[], help="store URL(s) to compare (default: a SQLite file in a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        stores = args.store or [f"sqlite:///{directory / 'bench.db'}"]
        print(f"policyguard serve, gate only, airline checklist, 20-message dialogue; {args.n} requests, "
              f"{args.clients} clients, {os.cpu_count()} cores")  # fmt: skip
        for store in stores:
            kind = store.split("://", 1)[0]
            results = {}
            for replicas in (1, 2):
                rate, p50, p99, cpu = run(replicas, store, args.n, args.clients, directory)
                results[replicas] = rate
                print(f"  {kind:<10} {replicas} replica{'s' if replicas > 1 else ' '}  {rate:8.1f} decisions/s   "
                      f"p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   ({cpu})")  # fmt: skip
            print(f"  {kind:<10} ratio 2 replicas / 1 replica: {results[2] / results[1]:.2f}x")
        load1, load5, _ = os.getloadavg()
        print(f"  load average during the run: {load1:.1f} (1 min), {load5:.1f} (5 min) on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
