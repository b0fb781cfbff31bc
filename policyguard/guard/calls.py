"""What the guard reads off a pending call before any stage judges it: its identity and its tool name."""

from __future__ import annotations

from typing import Any

from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.messages import ToolCall, Trajectory, last_mention


def call_ids(call: ToolCall) -> dict[str, Any]:
    """The call's identity for decisions and trace events, hashed once per decision.

    Arguments that cannot be hashed canonically (NaN, Infinity, nesting past
    the recursion limit) get ``args_sha256="unhashable"``: the trace format
    wants a string, and such a call is always blocked, so no grant or executor
    ever compares it.
    """
    return hashed_ids(call, call.args_sha256_or_none() or UNHASHABLE_ARGS)


def context_ids(call: ToolCall, context: CheckContext) -> dict[str, Any]:
    """:func:`call_ids` for a stage: the guard put the hash it took for this decision in ``context.extra``."""
    return hashed_ids(call, context.extra["args_sha256"])


def hashed_ids(call: ToolCall, args_sha256: str) -> dict[str, Any]:
    """:func:`call_ids` with the arguments' hash already taken for this decision."""
    return {"call_id": call.id, "tool": call.name, "args_sha256": args_sha256}


def call_place(trajectory: Trajectory, call: ToolCall, args_sha256: str | None = None) -> str:
    """Which issuance of ``call`` this is, for deny wins: the index of the newest assistant message in
    ``trajectory`` holding a call with its id, tool and arguments; ``""`` when no message shows it.

    A re-check of the same issued call with a longer history finds the same
    message; a later message reusing the id with the same tool and arguments is
    another call. ``""`` is the stricter identity with no place
    (:class:`~policyguard.enforcement.scoped.CallIdentity`), also for
    arguments with no canonical hash. ``args_sha256``: the call's hash when the
    caller already took it.
    """
    sha = call.args_sha256_or_none() if args_sha256 is None else args_sha256
    if sha is None or sha == UNHASHABLE_ARGS:
        return ""
    messages = trajectory.messages
    for index in range(last_mention(messages, call.id), -1, -1):  # no message after it names the id
        message = messages[index]
        if message.role != "assistant":
            continue
        for issued in message.tool_calls:
            if issued.id == call.id and issued.name == call.name and issued.args_sha256_or_none() == sha:
                return str(index)
    return ""


def plain_name(name: str) -> bool:
    """A tool name as tools are declared: printable, no spaces, unchanged by Unicode normalisation."""
    return bool(name) and name.isprintable() and not any(ch.isspace() for ch in name) and _nfkc(name) == name


def _nfkc(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFKC", text)
