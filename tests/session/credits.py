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
