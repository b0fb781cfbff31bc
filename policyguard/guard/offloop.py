"""Blocking work off the event loop: the async check runs its gate and session steps in a worker thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


async def off_loop(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` in a worker thread under asyncio (inline elsewhere, e.g. under trio)."""
    import asyncio  # only async callers pay for it: importing asyncio costs ~60 ms

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return function(*args)
    return await asyncio.to_thread(function, *args)
