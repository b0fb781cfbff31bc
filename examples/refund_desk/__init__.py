"""The refund desk every example guards: one policy, its checklist, and three plain-Python tools.

The tools work on an in-memory shop (``CUSTOMERS``, ``ORDERS``); ``REFUNDS`` lists every refund
that really ran, so an example can show that a blocked call never reached the tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POLICY = HERE / "policy.md"
CHECKLIST = HERE / "checklist.yaml"
TOOLS_JSON = HERE / "tools.json"
TOOL_SCHEMAS: list[dict[str, Any]] = json.loads(TOOLS_JSON.read_text(encoding="utf-8"))  # OpenAI Chat format

CUSTOMERS = {"ada@example.com": {"customer_id": "C1", "name": "Ada", "email": "ada@example.com"}}
ORDERS = {
    "O1": {"order_id": "O1", "customer_id": "C1", "captured": 80.0, "currency": "USD"},
    "O2": {"order_id": "O2", "customer_id": "C2", "captured": 45.0, "currency": "USD"},
}
REFUNDS: list[dict[str, Any]] = []


def find_customer(email: str) -> dict[str, Any]:
    """Read-only. A dict goes back to the model as JSON, which the gate can read as a fact."""
    if email not in CUSTOMERS:
        raise LookupError(f"no customer with email {email}")
    return CUSTOMERS[email]


def get_order(order_id: str) -> dict[str, Any]:
    """Read-only: the order, with the customer it belongs to and the amount captured."""
    if order_id not in ORDERS:
        raise LookupError(f"no order {order_id}")
    return ORDERS[order_id]


def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """The one write: moves money. Only the guard decides whether it runs."""
    refund = {"order_id": order_id, "amount": amount, "status": "refunded"}
    REFUNDS.append(refund)
    return refund


TOOLS = {"find_customer": find_customer, "get_order": get_order, "issue_refund": issue_refund}


def report(tool: str, arguments: dict[str, Any], allowed: bool, agent_reads: str) -> None:
    """Print one guarded call, the same way in every example."""
    verdict = "ALLOWED (the tool ran)" if allowed else "BLOCKED (the tool never ran)"
    print(f"  {verdict}: {tool} {json.dumps(arguments)}")
    print(f"    the agent reads: {' '.join(agent_reads.split())}")
