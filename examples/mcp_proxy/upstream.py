"""The refund desk as a plain MCP server (stdio): the upstream that ``policyguard mcp-proxy`` fronts.

It knows nothing of the policy. Run alone it would refund anything; behind the proxy, every
``issue_refund`` is checked first and a blocked one never arrives here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for the shared refund_desk
import refund_desk as desk  # noqa: E402

server = MCPServer("refund-desk", instructions="Refunds for Northwind orders.")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_customer(email: str) -> dict[str, Any]:
    """Look up a customer by email address."""
    return desk.find_customer(email)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_order(order_id: str) -> dict[str, Any]:
    """Look up one order: its customer and the amount captured."""
    return desk.get_order(order_id)


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund money on an order."""
    refund = desk.issue_refund(order_id, amount)
    print(f"upstream: refund executed {refund}", file=sys.stderr)  # stderr: stdout carries the MCP protocol
    return refund


if __name__ == "__main__":
    server.run()  # stdio
