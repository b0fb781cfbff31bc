"""``policyguard serve`` under mixed traffic: honest checks beside hostile requests.

Run: ``python benchmarks/bench_serve_mixed.py [--n 400] [--clients 8] [--hostile 8] [--slow 200]``
(needs the ``serve`` and ``tau2`` extras). One real server (gate only, SQLite store, airline
checklist) is measured twice on the same honest workload - ``--n`` airline cancellations the
gate allows (``bench_serve.py``'s 20-message dialogue), sent by ``--clients`` connections:

1. alone;
2. while ``--hostile`` clients send, in a loop, over-budget checks (``update_reservation_flights``
   with 600 flights: the check leaves the in-process budget for the isolated pool, which kills it
   past its time) and bodies over the size limit (5 MiB, answered 413), and ``--slow``
   half-open connections send a header line every few seconds (slowloris) and never finish.

Prints honest p50/p99 latency and requests/s for both phases and their ratio, the honest
errors (any answer other than an allow), what the hostile requests got (by status and stage),
``/healthz`` latency during the attack, and the server's peak resident memory. Every loop is
bounded by count and time, and only loopback is used.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _sibling(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def honest(url: str, n: int, clients: int, workload: Any, offset: int) -> tuple[list[float], int, float]:
    import httpx

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(offset, offset + n):
        queue.put_nowait(i)
    latencies: list[float] = []
    errors = 0

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                started = time.perf_counter()
                try:
                    await workload.step(http, i)
                except (SystemExit, httpx.HTTPError):
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, errors, n / (time.perf_counter() - started)


async def hostile(url: str, clients: int, stop: asyncio.Event, over_budget: dict[str, Any], seen: Counter[str]) -> None:
    import httpx

    head = b'{"trajectory": [], "call": {"id": "x", "name": "y", "arguments": {}}, "pad": "'
    oversized = head + b"a" * (5 << 20) + b'"}'

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            while not stop.is_set():
                try:
                    if index % 2 == 0:
                        response = await http.post("/v1/check", json=over_budget)
                        stage = response.json().get("stage", "") if response.status_code == 200 else ""
                        seen[f"over-budget {response.status_code} {stage}".strip()] += 1
                    else:
                        response = await http.post(
                            "/v1/check", content=oversized, headers={"content-type": "application/json"}
                        )
                        seen[f"oversized {response.status_code}"] += 1
                except httpx.HTTPError as exc:
                    seen[f"{'over-budget' if index % 2 == 0 else 'oversized'} {type(exc).__name__}"] += 1

    await asyncio.gather(*(client(i) for i in range(clients)))


def slowloris(host: str, port: int, count: int, stop: threading.Event) -> list[socket.socket]:
    opened: list[socket.socket] = []
    for _ in range(count):
        try:
            sock = socket.create_connection((host, port), timeout=2)
            sock.sendall(b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            opened.append(sock)
        except OSError:
            break

    def trickle() -> None:
        while not stop.wait(3):
            for sock in list(opened):
                try:
                    sock.sendall(b"X-a: b\r\n")
                except OSError:
                    opened.remove(sock)

    threading.Thread(target=trickle, daemon=True).start()
    return opened


async def health(url: str, stop: asyncio.Event, samples: list[float]) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                await http.get("/healthz")
                samples.append(time.perf_counter() - started)
            except httpx.HTTPError:
                samples.append(float("inf"))
            await asyncio.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="honest checks per phase (default 400)")
    parser.add_argument("--clients", type=int, default=8, help="honest client connections (default 8)")
    parser.add_argument("--hostile", type=int, default=8, help="hostile client connections (default 8)")
    parser.add_argument("--slow", type=int, default=200, help="half-open slowloris connections (default 200)")
    args = parser.parse_args()
    serve_bench, worst = _sibling("bench_serve"), _sibling("bench_worst_case")
    from policyguard.enforcement.grants import generate_keypair

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        key = directory / "key.pem"
        key.write_bytes(generate_keypair()[0])
        workload = serve_bench.CheckOnly(directory)
        process, url = serve_bench.start(
            "mixed", f"sqlite:///{directory / 'guard.db'}", key, directory / "trace.jsonl", workload.server_args
        )
        try:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            alone, alone_errors, alone_rate = asyncio.run(honest(url, args.n, args.clients, workload, 0))

            async def attacked() -> tuple[list[float], int, float, Counter[str], list[float]]:
                stop = asyncio.Event()
                seen: Counter[str] = Counter()
                samples: list[float] = []
                tasks = [
                    asyncio.create_task(hostile(url, args.hostile, stop, worst.airline_request(600), seen)),
                    asyncio.create_task(health(url, stop, samples)),
                ]
                await asyncio.sleep(1.0)  # let the attack start first
                result = await honest(url, args.n, args.clients, workload, args.n)
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
                return (*result, seen, samples)

            stop_slow = threading.Event()
            sockets = slowloris(host, int(port), args.slow, stop_slow)
            try:
                mixed, mixed_errors, mixed_rate, seen, samples = asyncio.run(attacked())
            finally:
                stop_slow.set()
                for sock in sockets:
                    sock.close()
            rss = peak_rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=30)
    ms = 1000
    print(f"honest checks: {args.n} per phase, {args.clients} clients; hostile: {args.hostile} clients, "
          f"{len(sockets)} half-open connections (of {args.slow} asked); {os.cpu_count()} cores")  # fmt: skip
    for label, values, errors, rate in (("alone", alone, alone_errors, alone_rate),
                                        ("under attack", mixed, mixed_errors, mixed_rate)):  # fmt: skip
        print(f"  {label:13} p50 {statistics.median(values) * ms:7.1f} ms  p99 {percentile(values, 0.99) * ms:7.1f} ms"
              f"  {rate:6.1f} req/s  honest errors {errors}")  # fmt: skip
    print(f"  ratio         p50 x{statistics.median(mixed) / statistics.median(alone):.2f}  "
          f"p99 x{percentile(mixed, 0.99) / percentile(alone, 0.99):.2f}  req/s x{mixed_rate / alone_rate:.2f}")
    finite = [s for s in samples if s != float("inf")]
    print(f"  /healthz during the attack: {len(samples)} probes, p50 {statistics.median(finite) * ms:.1f} ms, "
          f"max {max(samples) * ms:.1f} ms")  # fmt: skip
    print("  hostile answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(seen.items())))
    print(f"  server peak RSS: {rss:.0f} MB" if rss is not None else "  server peak RSS: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
