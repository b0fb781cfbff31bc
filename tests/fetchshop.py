"""A small shop for the hosts' fetching tests (issue 33): a checklist whose writes need reads, and its records.

``cancel_order`` needs the order read (``prerequisites: [get_order]``) and owned
by the principal; ``get_user``/``get_order`` are declared ``mutating: false``,
so a host that has them lets the guard read them itself.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from policyguard import Guard, HardGate, parse_checklist
from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

POLICY = "Only the owner may cancel an order.\n"

CHECKLIST = f"""
policy: {{name: shop, version: "{policy_version(POLICY)}"}}
principal: {{tool: get_user, field: user_id}}
facts:
  order:
    tool: get_order
    match: {{order_id: args.order_id}}
    refreshed_by: [cancel_order]
tools:
  get_order: {{mutating: false}}
  get_user: {{mutating: false}}
  cancel_order:
    requirements:
      - id: own-order
        text: Only the owner may cancel an order.
        kind: data
        source: Only the owner may cancel an order.
        prerequisites: [get_order]
        check: facts.order.user_id == principal
"""

ORDERS: dict[str, dict[str, Any]] = {
    "O1": {"order_id": "O1", "user_id": "ann", "status": "pending"},
    "O2": {"order_id": "O2", "user_id": "bob", "status": "pending"},
}


def checklist() -> Checklist:
    return parse_checklist(textwrap.dedent(CHECKLIST), file="shop.yaml")


def guard() -> Guard:
    cl = checklist()
    return Guard(cl, POLICY, gate=HardGate(cl), allow_unverified=True, trace=Trace())


def get_user(user_id: str) -> dict[str, Any]:
    return {"user_id": user_id}


def get_order(order_id: str) -> dict[str, Any]:
    return ORDERS[order_id]


def signed_in(user: str = "ann") -> Trajectory:
    """Ann says who she is, the agent reads her profile, and asks to cancel: no order read."""
    call = ToolCall(id="c0", name="get_user", arguments={"user_id": user})
    return Trajectory(
        messages=[
            Message(role="user", content=f"I am {user}, please cancel my order"),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="c0", content=json.dumps({"user_id": user})),
        ]
    )


def cancel(order_id: str = "O1", call_id: str = "w") -> ToolCall:
    return ToolCall(id=call_id, name="cancel_order", arguments={"order_id": order_id})
