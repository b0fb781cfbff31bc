"""Where guard meets host: the checklist's tool names against the host's real tools.

A checklist key the host does not have is a typo or a stale checklist: the
guard would judge a tool that never runs and suggest its name to the agent.
It is a :class:`~policyguard.errors.ConfigError` naming both spellings. A host
tool no checklist key covers is judged as unknown (blocked unless the guard
was built with ``unknown_tools="check"``); a warning lists such tools once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from policyguard.checklist.schema import Checklist, is_glob
from policyguard.errors import ConfigError
from policyguard.trajectory.toolnames import nearest

_log = logging.getLogger("policyguard")


def cross_check(checklist: Checklist, host_tools: Iterable[str], host: str) -> list[str]:
    """Raise when a checklist tool is missing from ``host_tools``; return (and log) the host tools no
    checklist key covers. ``host`` names the host in the messages (``GuardedTools``, ``the MCP server``)."""
    names = sorted(set(host_tools))
    missing = [key for key in checklist.tools if not is_glob(key) and key not in names]
    if missing:
        spelled = []
        for key in missing:
            guess = nearest(key, names)
            spelled.append(f"{key!r} (the host has {guess!r})" if guess is not None else repr(key))
        raise ConfigError(
            f"the checklist names tool(s) {host} does not have: {', '.join(spelled)}; fix the checklist's "
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
