"""Page load times of the review console: median of N GETs of the queue and a detail page.

    python benchmarks/bench_review.py [--n 20] [--pending 50]

Measured two ways: in process (Starlette's TestClient: routing, the queue read,
template rendering) and over HTTP against `policyguard review` on loopback
(adds uvicorn and the socket). Prints medians and p90 in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

TOKEN = "bench-review-token-0123456789"


def _requests(store: str, n: int) -> list[str]:
    from policyguard.approvals.queue import ApprovalRequest, RequirementView
    from policyguard.approvals.url import open_approvals

    queue = open_approvals(store)
    ids = []
    for i in range(n):
        request = ApprovalRequest(
            call_id=f"c{i}", tool="refund_payment", arguments={"order_id": f"ORD-{i}", "amount": 100.0 + i},
            args_sha256=f"{i:064x}", principal=f"user-{i}", policy_version="v1", expires_at=time.time() + 3600,
            requirements=[RequirementView(id="approved_above_500", status="NOT_MET", evidence="no approval",
                                          approvable=True)],
        )  # fmt: skip
        ids.append(queue.submit(request).id)
    queue.close()
    return ids


def _time(get: object, path: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        status = get(path)  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
        assert status == 200, (path, status)
    return times


def _report(label: str, times: list[float]) -> None:
    times = sorted(times)
    p90 = times[int(0.9 * (len(times) - 1))]
    print(f"{label:<34} median {statistics.median(times):7.2f} ms   p90 {p90:7.2f} ms   (n={len(times)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="GETs per page (default 20)")
    parser.add_argument("--pending", type=int, default=50, help="requests in the queue (default 50)")
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from policyguard.approvals.url import open_approvals
    from policyguard.review.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{Path(tmp) / 'guard.db'}"
        ids = _requests(store, args.pending)
        with TestClient(create_app(open_approvals(store), token=TOKEN), base_url="http://127.0.0.1") as client:
            client.post("/login", data={"reviewer": "bench", "token": TOKEN})
            _report(
                f"in process: queue ({args.pending} pending)",
                _time(lambda p: client.get(p).status_code, "/queue", args.n),
            )
            _report(
                "in process: detail page", _time(lambda p: client.get(p).status_code, f"/requests/{ids[0]}", args.n)
            )

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, POLICYGUARD_REVIEW_TOKEN=TOKEN, LITELLM_LOCAL_MODEL_COST_MAP="True")
        command = [sys.executable, "-m", "policyguard", "review", "--store", store, "--port", str(port)]
        server = subprocess.Popen(command,
                                  env=env, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
            opener.open(f"{base}/login", data=f"reviewer=bench&token={TOKEN}".encode(), timeout=10).read()

            def get(path: str) -> int:
                with opener.open(base + path, timeout=10) as response:
                    response.read()
                    return int(response.status)

            _report(f"over HTTP: queue ({args.pending} pending)", _time(get, "/queue", args.n))
            _report("over HTTP: detail page", _time(get, f"/requests/{ids[0]}", args.n))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores); figures are wall-clock on a shared machine")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
