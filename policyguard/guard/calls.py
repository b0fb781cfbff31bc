"""What the guard reads off a pending call before any stage judges it: its identity and its tool name."""

from __future__ import annotations

from typing import Any

from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.messages import ToolCall


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


def plain_name(name: str) -> bool:
    """A tool name as tools are declared: printable, no spaces, unchanged by Unicode normalisation."""
    return bool(name) and name.isprintable() and not any(ch.isspace() for ch in name) and _nfkc(name) == name


def _nfkc(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFKC", text)
