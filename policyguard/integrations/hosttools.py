"""Where guard meets host: the checklist's tool names against the host's real tools.

A checklist key the host does not have is a typo or a stale checklist: the
guard would judge a tool that never runs and suggest its name to the agent.
So is a read tool the checklist sends the agent to (a fact's source, a
requirement's prerequisite or ``read_first``, the principal's lookup): the
remediation "call get_ordr first" would name a tool the agent cannot call.
Either is a :class:`~policyguard.errors.ConfigError` naming both spellings.
A host tool no checklist key covers is judged as unknown (blocked unless the
guard was built with ``unknown_tools="check"``); a warning lists such tools once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from policyguard.checklist.schema import Checklist, is_glob
from policyguard.errors import ConfigError
from policyguard.trajectory.toolnames import nearest

_log = logging.getLogger("policyguard")
_LEADING_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)")


def named_reads(checklist: Checklist) -> dict[str, str]:
    """The tools the checklist's remediations may tell the agent to call, each with where it is named first."""
    named: dict[str, str] = {}
    for fact, source in checklist.facts.items():
        for tool in (source.tool, *source.also):
            named.setdefault(tool, f"fact {fact!r}")
    requirements = [*(r for spec in checklist.tools.values() for r in spec.requirements), *checklist.general_rules]
    for req in requirements:
        for tool in req.prerequisites:
            named.setdefault(tool, f"requirement {req.id!r} (prerequisites)")
        leading = _LEADING_NAME.match(req.read_first or "")
        if leading is not None:
            named.setdefault(leading.group(1), f"requirement {req.id!r} (read_first)")
    principal = checklist.principal
    if principal is not None:
        stated = [principal.stated.tool] if principal.stated is not None else []
        for tool in (principal.tool, *principal.lookups, *stated):
            named.setdefault(tool, "principal")
    return named


def cross_check(checklist: Checklist, host_tools: Iterable[str], host: str) -> list[str]:
    """Raise when a tool the checklist names is missing from ``host_tools``; return (and log) the host tools no
    checklist key covers. ``host`` names the host in the messages (``GuardedTools``, ``the MCP server``)."""
    names = sorted(set(host_tools))
    problems = []
    for key in checklist.tools:
        if not is_glob(key) and key not in names:
            problems.append(_spelled(key, names, host))
    for tool, where in named_reads(checklist).items():
        if tool not in names and tool not in checklist.tools:
            problems.append(f"{_spelled(tool, names, host)}, which {where} sends the agent to")
    if problems:
        raise ConfigError(
            f"the checklist names tool(s) {host} does not have: {'; '.join(problems)}. Fix the checklist's "
            f"spelling or give {host} the tool"
        )
    uncovered = [name for name in names if not checklist.known_tool(name)]
    if uncovered:
        _log.warning(
            "policyguard: %s has tool(s) no checklist entry covers, judged as unknown tools: %s",
            host,
            ", ".join(uncovered),
        )
    return uncovered


def _spelled(tool: str, names: list[str], host: str) -> str:
    guess = nearest(tool, names)
    return f"{tool!r} (did you mean {guess!r}, which {host} has?)" if guess is not None else repr(tool)
