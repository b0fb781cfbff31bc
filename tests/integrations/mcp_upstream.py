"""A small upstream MCP server for the proxy's tests: a shop with orders and refunds.

Run: ``python mcp_upstream.py --log FILE [--http PORT] [--slow FILE]``. Every
tool call it executes is appended to the log as one JSON line ``{"tool": ...,
"arguments": ...}``, so a test can prove what reached the upstream and what never did.

While the ``--slow`` file exists, a write waits as many seconds as the file says:
``issue_refund`` after it refunded (the refund is made, its answer is late) and
``cancel_order`` before it cancels (a request given up during the wait cancels nothing).
``cancel_order`` marks the order cancelled for later ``get_order`` reads.

Tools: ``get_order`` (readOnlyHint; order ``CRASH`` makes the process exit
at once, for the crash test), ``list_orders`` (readOnlyHint, not in the test
checklist), ``issue_refund`` and ``cancel_order`` (writes), ``delete_order`` (a
write the checklist does not name), ``fail_upstream`` (raises, for error
pass-through), ``announce`` (sends a progress report and a notification), ``slow_report``
(answers late). One prompt (``refund_request``) and one resource (``orders://O1``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

ORDERS: dict[str, dict[str, Any]] = {
    "O1": {"order_id": "O1", "status": "delivered", "captured": 100},
    "O2": {"order_id": "O2", "status": "pending", "captured": 50},
}


def build(log: Path, slow: Path | None = None) -> MCPServer:
    server = MCPServer("shop", version="1.0", instructions="A test shop.")
    orders = {order_id: dict(order) for order_id, order in ORDERS.items()}

    async def wait_if_slow() -> None:
        if slow is not None and slow.exists():
            await anyio.sleep(float(slow.read_text(encoding="utf-8")))

    def executed(tool: str, arguments: dict[str, Any]) -> None:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True), title="Get an order")
    def get_order(order_id: str) -> dict[str, Any]:
        """Read one order."""
        if order_id == "CRASH":
            os._exit(3)
        executed("get_order", {"order_id": order_id})
        return orders.get(order_id, {"order_id": order_id, "status": "unknown", "captured": 0})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def list_orders() -> dict[str, Any]:
        """List order ids."""
        executed("list_orders", {})
        return {"orders": sorted(orders)}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund money on an order."""
        executed("issue_refund", {"order_id": order_id, "amount": amount})
        await wait_if_slow()
        return {"refunded": amount, "order_id": order_id}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancel an order."""
        await wait_if_slow()
        executed("cancel_order", {"order_id": order_id})
        if order_id in orders:
            orders[order_id]["status"] = "cancelled"
        return {"cancelled": order_id}

    @server.tool()
    def delete_order(order_id: str) -> str:
        """Delete an order (not in the test checklist)."""
        executed("delete_order", {"order_id": order_id})
        return "deleted"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def fail_upstream() -> str:
        """Always fails."""
        raise ValueError("the shop database is down")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def announce(ctx: Context) -> str:
        """Report progress on this call and tell every client the resource list changed."""
        await ctx.report_progress(1, 2, "half way")
        await ctx.session.send_resource_list_changed()
        return "announced"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def slow_report(seconds: float) -> str:
        """Answer after a while (for the upstream timeout test)."""
        await anyio.sleep(seconds)
        return "late"

    @server.prompt(title="Refund request")
    def refund_request(order_id: str) -> str:
        """Ask for a refund."""
        return f"Please refund order {order_id}."

    @server.resource("orders://O1", name="order-O1", mime_type="application/json")
    def order_o1() -> str:
        return json.dumps(orders["O1"])

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--slow", type=Path, default=None, help="while this file exists, writes wait its seconds")
    args = parser.parse_args()
    server = build(args.log, args.slow)
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
