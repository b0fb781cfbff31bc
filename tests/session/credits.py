"""The credit desk the session tests share: one goodwill credit per conversation, limits only raised.

A customer gets at most one goodwill credit per conversation (counted over the
calls, as airline ``certificate-once`` is), and an account limit can only be
raised, judged on the account as last read.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from policyguard import Guard, HardGate, Message, ToolCall, parse_checklist
from policyguard.trajectory.canonical import policy_version

POLICY = "At most one goodwill credit per conversation. An account's limit can be raised, never lowered.\n"
CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: credits, version: "{policy_version(POLICY)}"}}
    facts:
      account:
        tool: get_account
        match: {{account_id: args.account_id}}
        refreshed_by: [set_limit]
        failed_writes_change_nothing: true
      credits_sent:
        tool: get_account
        also: [send_credit]
        match: {{}}
        collect: calls
    tools:
      get_account: {{mutating: false}}
      send_credit:
        requirements:
          - id: credit-once
            text: At most one goodwill credit per conversation; a failed one does not count.
            kind: data
            source: At most one goodwill credit per conversation.
            check: facts.credits_sent.filter(c, has(c.args.amount) && !c.error).size() == 0
      set_limit:
        requirements:
          - id: limit-up
            text: The limit can be raised, never lowered.
            kind: data
            source: An account's limit can be raised, never lowered.
            prerequisites: [get_account]
            check: args.limit >= facts.account.limit
    """
)


def make_guard(**kwargs: Any) -> Guard:
    checklist = parse_checklist(CHECKLIST)
    return Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True, **kwargs)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def asked(*calls: ToolCall) -> Message:
    return Message(role="assistant", tool_calls=list(calls))


def answer(call_id: str, value: Any, *, error: bool = False) -> Message:
    text = value if isinstance(value, str) else json.dumps(value)
    return Message(role="tool", tool_call_id=call_id, content=text, is_error=error)


def credit(call_id: str, amount: int = 50) -> ToolCall:
    return call(call_id, "send_credit", user_id="u1", amount=amount)


class Desk:
    """The credit desk's tools, as plain functions for an agent framework; ``ran`` lists every call that reached
    a tool, ``raises=True`` makes send_credit fail as a dropped connection would."""

    def __init__(self, limit: int = 10, *, raises: bool = False) -> None:
        self.limit = limit
        self.raises = raises
        self.ran: list[tuple[str, dict[str, Any]]] = []

    def tools(self) -> list[Any]:
        def get_account(account_id: str) -> str:
            """Read an account."""
            self.ran.append(("get_account", {"account_id": account_id}))
            return json.dumps({"account_id": account_id, "limit": self.limit})

        def set_limit(account_id: str, limit: int) -> str:
            """Set an account's limit."""
            self.ran.append(("set_limit", {"account_id": account_id, "limit": limit}))
            return "OK"

        def send_credit(user_id: str, amount: int) -> str:
            """Send a goodwill credit."""
            self.ran.append(("send_credit", {"user_id": user_id, "amount": amount}))
            if self.raises:
                raise ConnectionError("the credit service dropped the connection")
            return "credit sent"

        return [get_account, set_limit, send_credit]

    def names(self) -> list[str]:
        return [name for name, _ in self.ran]
