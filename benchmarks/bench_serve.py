"""Decisions per second and latency of ``policyguard serve`` through HTTP, with 1 and 2 replicas.

Run: ``python benchmarks/bench_serve.py [--n 2000] [--clients 16] [--store URL ...] [--guarded]`` (needs the
``serve`` and ``tau2`` extras). Each request is ``POST /v1/check`` with a 20-message airline
dialogue (OpenAI Chat JSON; the tool results are the tau2 airline records) and a pending
``cancel_reservation`` the gate allows (``--model none``: gate only), so every answer is an
allow with a signed grant and one deny-store read. The replicas are real
``python -m policyguard serve`` processes sharing one store; the client is one asyncio
process with ``--clients`` connections, spread round-robin over the replicas. Prints
decisions/s, p50/p99 latency per configuration and the ratio 2 replicas / 1 replica.
With ``--guarded`` it also times the full guarded call through HTTP, ``/v1/check`` then
``/v1/execute`` on the refund sandbox (grant verified, nonce spent, ledger claimed and
committed: ``--demo-effects``), on each ``--store``, and prints the store ratios. Server and
client CPU per operation are printed too: the figures depend on free cores, and the client
and the replicas share this machine.
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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def airline_dir() -> Path:
    import tau2

    return Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "airline"


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def dialogue() -> tuple[list[dict[str, Any]], dict[str, Any], str]:
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
    return messages, call, uid


def start(name: str, store: str, key: Path, trace: Path, server_args: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "policyguard", "serve", *server_args, "--store", store, "--grant-key", str(key),
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
            drain(process)
            return process, line.split("listening on ", 1)[1].split()[0]
    process.kill()
    raise SystemExit(f"replica {name} did not start")


def drain(process: subprocess.Popen[str]) -> None:
    """Keep reading the server's output: unread, the pipe fills (64 KiB) and every thread that logs blocks."""
    assert process.stdout is not None
    stream = process.stdout
    threading.Thread(target=lambda: all(True for _ in stream), name=f"drain-{process.pid}", daemon=True).start()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process so far (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CheckOnly:
    """``POST /v1/check`` on the airline dialogue: gate only, an allow with a grant each time."""

    label = "check (airline, gate only)"

    def __init__(self, directory: Path) -> None:
        self.trajectory, self.call, self.principal = dialogue()
        self.server_args = ["--policy", str(airline_dir() / "policy.md"),
                            "--checklist", str(ROOT / "checklists" / "airline.yaml")]  # fmt: skip

    def prepare(self, store: str, ids: range) -> None:
        return None

    async def step(self, http: Any, i: int) -> None:
        call = {**self.call, "id": f"pending-{i}-{time.monotonic_ns()}"}
        trajectory = self.trajectory[:-1] + [{"role": "assistant", "content": None, "tool_calls": [call]}]
        body = {"trajectory": trajectory, "call": call, "principal": self.principal}
        _expect_allow(await http.post("/v1/check", json=body))


class Guarded:
    """The full guarded call through HTTP: ``/v1/check`` then ``/v1/execute`` (a refund, one ledger claim)."""

    label = "check + execute (refund sandbox)"

    def __init__(self, directory: Path) -> None:
        self.template = (ROOT / "docs" / "serve" / "check-request.json").read_text(encoding="utf-8")
        self.prefix = f"B{os.getpid()}x{time.time_ns() % 10**9}"
        self.server_args = ["--policy", str(ROOT / "benchmarks" / "refund" / "policy.md"),
                            "--checklist", str(ROOT / "benchmarks" / "refund" / "checklist.yaml"),
                            "--demo-effects", str(directory / "effects.jsonl")]  # fmt: skip

    def prepare(self, store: str, ids: range) -> None:
        from policyguard.enforcement.storeurl import open_store

        opened = open_store(store)
        for i in ids:
            opened.set_captured(f"{self.prefix}-{i}", 200)

    async def step(self, http: Any, i: int) -> None:
        body = json.loads(self.template.replace("T-1001", f"{self.prefix}-{i}"))
        body.pop("session_id", None)  # each step is a conversation of its own; the README's figures are one-shot
        decision = _expect_allow(await http.post("/v1/check", json=body))
        run = {"call": body["call"], "grant": decision["grant"], "principal": body["principal"]}
        response = await http.post("/v1/execute", json=run)
        if response.status_code != 200 or response.json().get("reason") != "executed":
            raise SystemExit(f"execute failed {response.status_code}: {response.text[:300]}")


class Conversation:
    """``POST /v1/check`` on the airline dialogue, each client growing its own conversation.

    Every step adds the previous cancellation's result (the reservation record, as the tool returns it),
    a user turn and a new pending ``cancel_reservation``; after ``turns`` steps the client starts a new
    conversation. With ``session=True`` each conversation has its own ``session_id``, so the server
    merges only the messages it adds into the session's record and judges on the record; without it
    the same bodies are checked one-shot. The two are the same dialogue, so their ratio is what the
    session record costs.
    """

    def __init__(self, directory: Path, *, session: bool, turns: int = 40) -> None:
        self.base, self.call, self.principal = dialogue()
        self.session, self.turns = session, turns
        self.label = f"check, growing dialogue ({'session_id' if session else 'one-shot'})"
        self.server_args = CheckOnly(directory).server_args
        self.reservation = self.base[6]["content"]
        self.state: dict[int, tuple[str, list[dict[str, Any]], int]] = {}  # client -> (session, messages, steps)
        self.run = f"S{os.getpid()}x{time.time_ns() % 10**9}"

    def prepare(self, store: str, ids: range) -> None:
        return None

    async def step(self, http: Any, i: int) -> None:
        key = id(http)
        session_id, messages, steps = self.state.get(key, ("", [], self.turns))
        if steps >= self.turns:
            session_id, messages, steps = f"{self.run}-{i}", list(self.base[:-1]), 0
        else:
            last = messages[-1]["tool_calls"][0]["id"]
            messages = messages + [
                {"role": "tool", "tool_call_id": last, "content": self.reservation},
                {"role": "user", "content": f"Please make sure it is cancelled ({steps})."},
            ]
        call = {**self.call, "id": f"pending-{i}-{time.monotonic_ns()}"}
        messages = messages + [{"role": "assistant", "content": None, "tool_calls": [call]}]
        body: dict[str, Any] = {"trajectory": messages, "call": call, "principal": self.principal}
        if self.session:
            body["session_id"] = session_id
        _expect_allow(await http.post("/v1/check", json=body))
        self.state[key] = (session_id, messages, steps + 1)


def _expect_allow(response: Any) -> dict[str, Any]:
    decision: dict[str, Any] = response.json()
    if response.status_code != 200 or decision.get("outcome") != "allow" or "grant" not in decision:
        raise SystemExit(f"unexpected answer {response.status_code}: {str(decision)[:300]}")
    return decision


async def load(urls: list[str], ids: range, clients: int, workload: Any) -> tuple[float, list[float]]:
    import httpx

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in ids:
        queue.put_nowait(i)
    latencies: list[float] = []

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=urls[index % len(urls)], timeout=60) as http:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                started = time.perf_counter()
                await workload.step(http, i)
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return len(ids) / (time.perf_counter() - started), latencies


def run(
    workload: Any, replicas: int, store: str, n: int, clients: int, directory: Path, offset: int
) -> tuple[float, float, float, str]:
    from policyguard.enforcement.grants import generate_keypair

    key = directory / "grant.pem"
    if not key.exists():
        key.write_bytes(generate_keypair()[0])
    warm, timed = range(offset, offset + min(200, n)), range(offset + min(200, n), offset + min(200, n) + n)
    workload.prepare(store, range(warm.start, timed.stop))
    processes = [
        start(f"r{i}", store, key, directory / f"trace-{offset}-{i}.jsonl", workload.server_args)
        for i in range(replicas)
    ]
    try:
        urls = [url for _, url in processes]
        asyncio.run(load(urls, warm, clients, workload))  # warm-up: imports, CEL compilation, connections
        server_before = [cpu_seconds(p.pid) for p, _ in processes]
        client_before = time.process_time()
        rate, latencies = asyncio.run(load(urls, timed, clients, workload))
        client_cpu = time.process_time() - client_before
        server_after = [cpu_seconds(p.pid) for p, _ in processes]
    finally:
        for process, _ in processes:
            process.terminate()
            process.wait(timeout=30)
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    cpu = f"client CPU {client_cpu / n * 1000:5.2f} ms/op"
    if all(v is not None for v in server_before + server_after):
        server = sum(a - b for a, b in zip(server_after, server_before, strict=True))  # type: ignore[operator]
        cpu = f"server CPU {server / n * 1000:5.2f} ms/op, " + cpu
    return rate, p50, p99, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="requests per configuration (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent client connections (default 16)")
    parser.add_argument(
        "--store", action="append", default=[], help="store URL(s) to compare (default: a SQLite file in a temp dir)"
    )
    parser.add_argument(
        "--guarded",
        action="store_true",
        help="also time the full guarded call through HTTP: /v1/check then /v1/execute (refund sandbox, "
        "one nonce and one ledger claim per call) on each store",
    )
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="also time a growing dialogue per client, one-shot and with a session_id per conversation, and "
        "print the ratio session / one-shot",
    )
    parser.add_argument("--only-sessions", action="store_true", help="time the growing dialogues only")
    parser.add_argument("--replicas", default="1,2", help="replica counts to run (default 1,2)")
    args = parser.parse_args()
    replica_counts = [int(x) for x in args.replicas.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        stores = args.store or [f"sqlite:///{directory / 'bench.db'}"]
        print(f"policyguard serve: {args.n} requests per line, {args.clients} clients, {os.cpu_count()} cores; "
              "airline dialogue of 20 messages")  # fmt: skip
        workloads: list[Any] = [] if args.only_sessions else [CheckOnly(directory)]
        workloads += [Guarded(directory)] if args.guarded else []
        if args.sessions or args.only_sessions:
            workloads += [Conversation(directory, session=False), Conversation(directory, session=True)]
        offset = 0
        rates: dict[tuple[str, str, int], float] = {}
        p99s: dict[tuple[str, str, int], float] = {}
        for workload in workloads:
            for store in stores:
                kind = store.split("://", 1)[0]
                for replicas in replica_counts:
                    rate, p50, p99, cpu = run(workload, replicas, store, args.n, args.clients, directory, offset)
                    offset += args.n + 200
                    rates[(workload.label, kind, replicas)] = rate
                    p99s[(workload.label, kind, replicas)] = p99
                    print(f"  {workload.label:<34} {kind:<10} {replicas} replica{'s' if replicas > 1 else ' '} "
                          f"{rate:8.1f} ops/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   ({cpu})")  # fmt: skip
                if 1 in replica_counts and 2 in replica_counts:
                    ratio = rates[(workload.label, kind, 2)] / rates[(workload.label, kind, 1)]
                    print(f"  {workload.label:<34} {kind:<10} ratio 2 replicas / 1 replica: {ratio:.2f}x")
                if isinstance(workload, Conversation) and workload.session:
                    for replicas in replica_counts:
                        one_shot = (workload.label.replace("session_id", "one-shot"), kind, replicas)
                        here = (workload.label, kind, replicas)
                        print(f"  session_id / one-shot  {kind:<10} {replicas} replica{'s' if replicas > 1 else ' '}"
                              f"  throughput {rates[here] / rates[one_shot]:.2f}x   "
                              f"p99 {p99s[here] / p99s[one_shot]:.2f}x")  # fmt: skip
            kinds = sorted({k for (label, k, _) in rates if label == workload.label})
            if "sqlite" in kinds and len(kinds) > 1:
                for other in (k for k in kinds if k != "sqlite"):
                    ratio = rates[(workload.label, other, 1)] / rates[(workload.label, "sqlite", 1)]
                    print(f"  {workload.label:<34} ratio {other} / sqlite (1 replica): {ratio:.2f}x")
        load1, load5, _ = os.getloadavg()
        print(f"  load average during the run: {load1:.1f} (1 min), {load5:.1f} (5 min) on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
