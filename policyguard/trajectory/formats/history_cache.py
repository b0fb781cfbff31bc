"""Conversations that send their whole history on every check, converted once per message.

A client of ``policyguard serve`` that names a ``session_id`` still sends the
whole dialogue with each check; converting all of it again costs O(history) per
check, most of a check's time at a few dozen messages. :class:`HistoryCache`
keeps, per conversation key, the OpenAI Chat conversion of the last list it
saw (a :class:`~policyguard.trajectory.formats.chat_history.ChatHistory` that
compares every earlier message, so nothing changed is ever judged on a stale
conversion) and converts only what differs from it.

The answer is always what :func:`policyguard.trajectory.formats.to_trajectory`
gives for the same arguments, errors included (``tests/formats/test_history_cache.py``
checks it on generated histories): the cache is used only for a list in the
OpenAI Chat format without a separate system prompt; anything else is
converted as before. Under ``format="auto"`` the detection is kept too: the
formats the unchanged prefix fits are remembered, and only the messages after
it narrow them (:func:`policyguard.trajectory.formats.detect.narrow`, in the
order a whole detection would meet them, then the messages are read). A
conversion that raises drops the key's entry, so a refused list leaves
nothing half-read behind. The key only chooses which earlier list to compare
with: a wrong or reused key costs a conversion, never a wrong answer.

Memory is bounded: at most ``max_entries`` keys and ``max_weight`` in total
(the caller's measure of each list, e.g. its request's size in bytes), the
least recently used dropped first; a list heavier than a quarter of
``max_weight`` is converted without being kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..messages import Trajectory
from . import Format, langchain, to_trajectory
from .chat_history import ChatHistory
from .common import plain
from .detect import ALL, CHAT, choose, narrow

DEFAULT_ENTRIES = 256
DEFAULT_WEIGHT = 64 * 1024 * 1024


class _Entry:
    __slots__ = ("format", "history", "lock", "weight", "fits", "spent")

    def __init__(self, format: str) -> None:
        self.format = format  # what the lists were converted as: "auto" or "openai_chat"
        self.history = ChatHistory(lenient_arguments=False)
        self.lock = threading.Lock()
        self.weight = 0
        self.fits: list[frozenset[str]] = []  # under "auto": the formats messages[: i + 1] fit
        self.spent = False  # a conversion raised or gave up here: its state may be half-updated, never read again

    def convert(self, messages: list[Any]) -> Trajectory | None:
        """The conversion, or None when the list is not OpenAI Chat (detected): the caller converts it whole."""
        keep = self.history.unchanged_prefix(messages)
        if self.format == "auto":
            del self.fits[keep:]
            possible = self.fits[-1] if self.fits else ALL
            for index in range(keep, len(messages)):
                possible = narrow(possible, plain(messages[index]), index)  # nested SDK objects count too
                self.fits.append(possible)
            if choose(possible) != CHAT:  # raises as a whole detection would when several formats remain
                return None
        return self.history.convert(messages, keep=keep)


class HistoryCache:
    """Converted Chat histories by conversation key; thread-safe (one conversion per key at a time)."""

    def __init__(self, *, max_entries: int = DEFAULT_ENTRIES, max_weight: int = DEFAULT_WEIGHT) -> None:
        if max_entries < 1 or max_weight < 1:
            raise ValueError("max_entries and max_weight must be at least 1")
        self.max_entries, self.max_weight = max_entries, max_weight
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def convert(
        self, key: str, messages: Any, format: Format = "auto", *, system: Any = None, weight: int = 0
    ) -> Trajectory:
        """``to_trajectory(messages, format, system=system)``, reusing what ``key``'s last list shared with it."""
        if (
            system is not None
            or format not in ("auto", CHAT)
            or not isinstance(messages, list)
            or not messages
            or weight > self.max_weight // 4
            or (format == "auto" and langchain.is_langchain_input(messages))
        ):
            return to_trajectory(messages, format, system=system)
        entry = self._take(key, format)
        with entry.lock:
            if entry.spent:  # another thread's conversion failed on it while this one waited for the lock
                return to_trajectory(messages, format)
            try:
                trajectory = entry.convert(messages)
            except BaseException:
                entry.spent = True
                self._drop(key, entry)
                raise
            if trajectory is None:
                entry.spent = True
        if trajectory is None:
            self._drop(key, entry)
            return to_trajectory(messages, format)
        self._weigh(key, entry, weight)
        return trajectory

    def _take(self, key: str, format: str) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.format != format:
                del self._entries[key]
                self._weight -= entry.weight
                entry = None
            if entry is None:
                entry = self._entries[key] = _Entry(format)
            else:
                self._entries.move_to_end(key)
            return entry

    def _drop(self, key: str, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
                self._weight -= entry.weight

    def _weigh(self, key: str, entry: _Entry, weight: int) -> None:
        with self._lock:
            if self._entries.get(key) is not entry:
                return  # dropped meanwhile: nothing of it is counted
            self._weight += weight - entry.weight
            entry.weight = weight
            while self._entries and (len(self._entries) > self.max_entries or self._weight > self.max_weight):
                _, oldest = self._entries.popitem(last=False)
                self._weight -= oldest.weight
