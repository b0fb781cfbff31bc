"""What ``policyguard mcp-proxy`` adds to a tool call, measured end to end with real processes.

Run: ``python benchmarks/bench_mcp_proxy.py [--n 300] [--json]`` (needs the ``mcp`` extra; no network, no model).

One ``mcp.ClientSession`` talks over stdio to the test shop server
(``tests/integrations/mcp_upstream.py``) directly, and another to the same server
behind the proxy (``--model none``: the gate alone, as a verifier model's own
latency is the provider's, not the proxy's). Each side makes ``n`` guarded
calls (``issue_refund``, allowed by the gate's two CEL checks over the
``get_order`` read made first) and ``n`` read-only calls (``get_order``), one
after another; the report is the median and p90 per call and the median added
by the proxy. The session's trajectory grows by two messages per call, so the
last guarded calls are judged over a dialogue of about ``4 n`` messages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "integrations"
PY = sys.executable


@asynccontextmanager
async def session(args: list[str], errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=PY, args=args, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)})
    with errlog.open("w", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            with anyio.fail_after(60):
                await client.initialize()
            yield client


async def timed(client: ClientSession, n: int, name: str, arguments: dict[str, Any]) -> list[float]:
    """Seconds per call for ``n`` calls; any error result stops the benchmark (it would measure a refusal)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        result = await client.call_tool(name, arguments, read_timeout_seconds=60)
        times.append(time.perf_counter() - started)
        if result.is_error:
            raise SystemExit(f"bench_mcp_proxy: {name} answered with an error: {result.content}")
    return times


async def measure(n: int, work: Path) -> dict[str, Any]:
    upstream = [str(FIXTURES / "mcp_upstream.py"), "--log", str(work / "executed.jsonl")]
    proxy = [
        "-m",
        "policyguard",
        "mcp-proxy",
        "--policy",
        str(FIXTURES / "mcp_policy.md"),
        "--checklist",
        str(FIXTURES / "mcp_checklist.yaml"),
        "--model",
        "none",
        "--",
        PY,
        *upstream,
    ]
    refund = {"order_id": "O1", "amount": 1}
    read = {"order_id": "O1"}
    runs: dict[str, dict[str, list[float]]] = {}
    for side, args in (("direct", upstream), ("proxy", proxy)):
        async with session(args, work / f"{side}.err") as client:
            await timed(client, 20, "get_order", read)  # warm-up, and the read the refund's checks need
            runs[side] = {
                "guarded": await timed(client, n, "issue_refund", refund),
                "read_only": await timed(client, n, "get_order", read),
            }
    report: dict[str, Any] = {"n": n}
    for kind in ("guarded", "read_only"):
        direct, proxied = runs["direct"][kind], runs["proxy"][kind]
        report[kind] = {
            "direct_median_ms": round(statistics.median(direct) * 1000, 3),
            "proxy_median_ms": round(statistics.median(proxied) * 1000, 3),
            "direct_p90_ms": round(_p90(direct) * 1000, 3),
            "proxy_p90_ms": round(_p90(proxied) * 1000, 3),
            "added_median_ms": round((statistics.median(proxied) - statistics.median(direct)) * 1000, 3),
            # the session grows with every call: does the per-call cost grow with it?
            "added_median_first_50_ms": _added(direct[:50], proxied[:50]),
            "added_median_last_50_ms": _added(direct[-50:], proxied[-50:]),
        }
    return report


def _added(direct: list[float], proxied: list[float]) -> float:
    return round((statistics.median(proxied) - statistics.median(direct)) * 1000, 3)


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="calls per kind and side (default 300; at least 200)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        report = anyio.run(measure, max(args.n, 20), Path(work))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"mcp-proxy overhead, stdio both ways, {report['n']} calls per kind (median / p90 per call):")
    for kind in ("guarded", "read_only"):
        r = report[kind]
        print(
            f"  {kind:9}  direct {r['direct_median_ms']:.2f} / {r['direct_p90_ms']:.2f} ms   "
            f"proxy {r['proxy_median_ms']:.2f} / {r['proxy_p90_ms']:.2f} ms   added {r['added_median_ms']:.2f} ms "
            f"(first 50 calls {r['added_median_first_50_ms']:.2f}, last 50 {r['added_median_last_50_ms']:.2f})"
        )


if __name__ == "__main__":
    main()
