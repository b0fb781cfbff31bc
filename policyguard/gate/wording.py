"""What the agent reads when the gate disproves a requirement.

A requirement's text is either a rule ("A reservation can be cancelled only
if ...") or a statement of fact that must hold ("The order belongs to the
customer"). Spliced after "not allowed:" a fact reads as the thing forbidden,
so the text is quoted as what the requirement says, and the message reads as
sentences for both kinds.
"""

from __future__ import annotations

_END = (".", "!", "?")


def quoted(text: str) -> str:
    """``text`` on one line, ending as a sentence, in double quotes (its own double quotes made single)."""
    line = " ".join(text.split()).replace('"', "'")
    if not line.endswith(_END):
        line += "."
    return f'"{line}"'


def not_met_message(requirement_id: str, text: str) -> str:
    """The remediation for a requirement whose check is false."""
    return (
        f"This action is blocked: it does not meet requirement {requirement_id}, which says {quoted(text)} "
        "Explain this to the user and do not retry the same call."
    )


def read_first_message(requirement_id: str, read: str, tool: str) -> str:
    """The remediation for a requirement whose evidence was not read yet (``read`` names the read to make)."""
    read = " ".join(read.split()).rstrip(".")
    return f"Read first: call {read} before {tool} (requirement {requirement_id})."
