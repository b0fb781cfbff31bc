"""The hosts' read tools as the guard's :class:`~policyguard.guard.fetching.Fetcher`.

Every host that runs the agent's tools hands the guard the ones the checklist
declares ``mutating: false`` (an unknown tool counts as mutating and is never
handed over), so a write blocked only for a read the dialogue lacks is judged
on the read the guard makes itself. What the guard reads goes to its session
record and trace, never into the agent's dialogue.

Synchronous tools go in a :class:`~policyguard.guard.fetching.ToolTable`.
Asynchronous ones (LangChain's ``ainvoke``, the Agents SDK's function tools,
the MCP upstream) go in a :class:`LoopFetcher`: the guard's gate runs in a
worker thread while the host's event loop awaits it
(:func:`~policyguard.guard.offloop.off_loop`), so the read is scheduled on
that loop and the worker waits for it. With no loop to schedule on (called on
the loop itself, or under trio, where the gate runs inline) the read fails,
and a failed read leaves the block as it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.guard.fetching import Answer

Read = Callable[[str, dict[str, Any]], Coroutine[Any, Any, Answer]]


def as_answer(value: Any, *, is_error: bool = False) -> Answer:
    """A tool's return value as the guard reads it: text as is, anything else as JSON (``default=str``)."""
    if isinstance(value, Answer):
        return value
    return Answer(value if isinstance(value, str) else json.dumps(value, default=str), is_error)


def read_names(checklist: Checklist, names: Iterable[str]) -> frozenset[str]:
    """The host tool names the guard may call itself: those the checklist declares ``mutating: false``."""
    return frozenset(name for name in names if not checklist.is_mutating(name))


class LoopFetcher:
    """A Fetcher over async reads, run on ``loop`` (the host's) from the guard's worker thread.

    ``read(tool, arguments)`` performs one read; only tools in ``names`` are
    ever called (anything else raises :class:`LookupError`).
    """

    def __init__(self, read: Read, names: Iterable[str], loop: asyncio.AbstractEventLoop | None) -> None:
        self._read = read
        self.names = frozenset(names)
        self._loop = loop

    @classmethod
    def here(cls, read: Read, names: Iterable[str]) -> LoopFetcher | None:
        """One bound to the running loop, or None when ``names`` is empty (nothing to read)."""
        names = frozenset(names)
        if not names:
            return None
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        return cls(read, names, loop)

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Answer:
        if tool not in self.names:
            raise LookupError(f"the host has no read tool {tool!r}")
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("no event loop to run the host's read tool on")
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:  # waiting here would block the loop the read needs
            raise RuntimeError("the guard's read cannot wait on the loop it runs on")
        return asyncio.run_coroutine_threadsafe(self._read(tool, dict(arguments)), loop).result()
