"""``/healthz`` of every HTTP surface past 1,100 half-open connections, each server under ``ulimit -n 1024``.

Run: ``python benchmarks/bench_health_flood.py [--surface serve review mcp-proxy] [--half-open 1100]
[--probes 40] [--over-budget 8] [--json]`` (needs the ``serve``, ``mcp`` and ``tau2`` extras; loopback only,
no model).

Each surface is started as its own process with its open-file limit set to 1024 (soft and hard,
as ``ulimit -n 1024`` does), with the default server limits (``policyguard.serve.server``):

* ``serve``: the airline checklist, gate only;
* ``review``: the approval console over an empty SQLite queue;
* ``mcp-proxy --listen``: the test shop (``tests/integrations/mcp_upstream.py``) behind the proxy.

Then, per surface, ``--probes`` ``GET /healthz`` on a fresh connection each (as a load balancer
probes), 20 ms apart, in three phases:

1. ``idle``: nothing else;
2. ``half-open``: right after this process opened ``--half-open`` connections that sent part of
   their headers and never finish (more than the server may open files; they stay open during the
   probes, well inside the 10 s header timeout);
3. ``serve`` only, ``over-budget``: while ``--over-budget`` clients send, in a loop, checks whose
   estimate is over the in-process budget (``update_reservation_flights`` with 600 flights, the
   isolated pool), and ``both``: the half-open connections and that flood together.

Printed per surface and phase: median, p90 and max probe time, and failed probes (no 200 within 10 s).
The target is a max of 100 ms; the machine's other load counts in every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "integrations"
OPEN_FILES = 1024
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # the blank line that ends the headers never comes
PROBE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
TOKEN = "a-review-token-long-enough-for-the-console-0123456789"
START_TIMEOUT_S = 60.0


def _sibling(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def probe(address: tuple[str, int], timeout: float = 10.0) -> float:
    """Seconds for one ``GET /healthz`` on a fresh connection to answer 200, or ``inf``."""
    started = time.perf_counter()
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.sendall(PROBE)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        return float("inf")
    return time.perf_counter() - started if answer.startswith(b"HTTP/1.1 200") else float("inf")


def command(surface: str, work: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start ``surface`` listening on ``port``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    py = [sys.executable, "-m", "policyguard"]
    if surface == "serve":
        airline = _sibling("bench_serve").airline_dir()
        return [*py, "serve", "--policy", str(airline / "policy.md"),
                "--checklist", str(ROOT / "checklists" / "airline.yaml"), "--port", str(port),
                "--log-level", "warning"], env  # fmt: skip
    if surface == "review":
        from policyguard.approvals.url import open_approvals

        store = f"sqlite:///{work / 'approvals.db'}"
        open_approvals(store, create=True)
        env["POLICYGUARD_REVIEW_TOKEN"] = TOKEN
        return [*py, "review", "--store", store, "--port", str(port)], env
    if surface == "mcp-proxy":
        upstream = [sys.executable, str(FIXTURES / "mcp_upstream.py"), "--log", str(work / "executed.jsonl")]
        return [*py, "mcp-proxy", "--policy", str(FIXTURES / "mcp_policy.md"),
                "--checklist", str(FIXTURES / "mcp_checklist.yaml"), "--listen", f"127.0.0.1:{port}",
                "--", *upstream], env  # fmt: skip
    raise SystemExit(f"unknown surface {surface!r}")


@contextlib.contextmanager
def running(surface: str, work: Path) -> Iterator[tuple[str, int]]:
    """``surface`` under ``ulimit -n 1024``, once its ``/healthz`` answers; stopped on exit."""
    port = _free_port()
    argv, env = command(surface, work, port)
    log = (work / f"{surface}.log").open("w")
    process = subprocess.Popen(argv, env=env, cwd=str(work), preexec_fn=_limit_open_files,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    address = ("127.0.0.1", port)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while probe(address, 1.0) == float("inf"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{surface} did not start: {(work / f'{surface}.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)
        log.close()


@contextlib.contextmanager
def half_open(address: tuple[str, int], count: int) -> Iterator[int]:
    """``count`` connections that sent part of their headers (the number that connected); all closed on exit."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            try:
                sock = socket.create_connection(address, timeout=5)
            except OSError:
                break
            opened.append(sock)
            with contextlib.suppress(OSError):  # the server may already have closed it for a newer one
                sock.sendall(PARTIAL)
        yield len(opened)
    finally:
        for sock in opened:
            sock.close()


@contextlib.contextmanager
def over_budget(url: str, clients: int) -> Iterator[Counter[str]]:
    """``clients`` threads sending over-budget checks in a loop (what they got, by status and stage)."""
    import httpx

    body = _sibling("bench_worst_case").airline_request(600)
    stop = threading.Event()
    seen: Counter[str] = Counter()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while not stop.is_set():
                try:
                    response = http.post("/v1/check", json=body)
                    stage = response.json().get("stage", "") if response.status_code == 200 else ""
                    seen[f"{response.status_code} {stage}".strip()] += 1
                except httpx.HTTPError as exc:
                    seen[type(exc).__name__] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2.0)  # the flood is under way (the pool's workers started) before the probes
        yield seen
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def probes(address: tuple[str, int], count: int) -> list[float]:
    times = []
    for _ in range(count):
        times.append(probe(address))
        time.sleep(0.02)
    return times


def summary(times: list[float]) -> dict[str, Any]:
    finite = sorted(t for t in times if t != float("inf"))
    ms = 1000.0
    return {
        "probes": len(times),
        "failed": len(times) - len(finite),
        "median_ms": round(statistics.median(finite) * ms, 1) if finite else None,
        "p90_ms": round(finite[min(len(finite) - 1, int(0.9 * len(finite)))] * ms, 1) if finite else None,
        "max_ms": round(max(times) * ms, 1) if times else None,
    }


def measure(surface: str, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with running(surface, work) as address:
        url = f"http://{address[0]}:{address[1]}"
        rows.append({"surface": surface, "phase": "idle", **summary(probes(address, args.probes))})
        with half_open(address, args.half_open) as opened:
            rows.append({"surface": surface, "phase": f"half-open {opened}", **summary(probes(address, args.probes))})
        if surface == "serve" and args.over_budget:
            time.sleep(1.0)  # the closed connections are gone from the server's table
            with over_budget(url, args.over_budget) as seen:
                rows.append({"surface": surface, "phase": f"over-budget x{args.over_budget}",
                             **summary(probes(address, args.probes)), "answers": dict(seen)})  # fmt: skip
                with half_open(address, args.half_open) as opened:
                    rows.append({"surface": surface, "phase": f"both ({opened} + x{args.over_budget})",
                                 **summary(probes(address, args.probes))})  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    surfaces = ["serve", "review", "mcp-proxy"]
    parser.add_argument("--surface", nargs="+", default=surfaces, choices=surfaces, help="the surfaces (default all)")
    parser.add_argument("--half-open", type=int, default=1100, help="half-open connections (default 1100)")
    parser.add_argument("--probes", type=int, default=40, help="/healthz probes per phase (default 40)")
    parser.add_argument("--over-budget", type=int, default=8, help="serve: over-budget clients (default 8; 0: none)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.half_open + 256
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for surface in args.surface:
            work = Path(tmp) / surface
            work.mkdir()
            rows += measure(surface, args, work)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"/healthz, each server under ulimit -n {OPEN_FILES}; {args.probes} probes per phase; "
          f"{os.cpu_count()} cores (shared)")  # fmt: skip
    for row in rows:
        print(f"  {row['surface']:10} {row['phase']:24} median {row['median_ms']:>7} ms  p90 {row['p90_ms']:>7} ms  "
              f"max {row['max_ms']:>7} ms  failed {row['failed']}")  # fmt: skip
        if "answers" in row:
            print(f"  {'':10} {'':24} over-budget answers while probing: {row['answers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
