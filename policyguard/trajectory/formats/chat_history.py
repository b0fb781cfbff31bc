"""An OpenAI Chat history converted once, message by message, for a loop that checks every call.

A tool-calling loop hands the guard its whole message list on every call;
converting it again each time costs O(history) per call (1.7 s at 50,000
messages). :class:`ChatHistory` keeps the converted prefix and a snapshot of
each message it converted. On the next call it finds the first message that no
longer equals its snapshot (changed in place, replaced, removed) and converts
again from there, so a changed earlier message is never judged on a stale
conversion. Messages whose data holds numbers or bools where a type matters
(dict arguments, an ``is_error`` flag) are compared as JSON text too, since
``1 == 1.0 == True`` in Python.

The same rules as :func:`policyguard.trajectory.formats.openai_chat.read` hold (call ids
used once, answered once, strict error flags), with one exception a loop
needs (``lenient_arguments=True``, the default): a call whose arguments cannot
be read is kept with empty arguments, as long as it is never answered by a
successful result. The guard refuses such a call; its error result stays in the
history, and the loop must keep running. With ``lenient_arguments=False`` the
conversion is exactly ``openai_chat.read``'s, errors included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from policyguard.errors import FormatError

from ..messages import Message, PairedMessages, Pairing, Trajectory
from .common import CallIds, plain
from .openai_chat import check_message, read_plain_message


class ChatHistory:
    """The converted prefix of one Chat message list; not thread-safe (callers lock).

    ``tail_only=True`` compares only the last converted message (and the
    length) to decide that the prefix is unchanged, so a long dialogue costs
    no more per call than a short one. An earlier message changed in place is
    then not read again: use it only where the guard's session record, which
    keeps what it saw first, is what the checks read (``GuardedTools``).
    """

    def __init__(self, *, tail_only: bool = False, lenient_arguments: bool = True) -> None:
        self.tail_only = tail_only
        self.lenient_arguments = lenient_arguments
        self._snapshots: list[Any] = []
        self._strict: dict[int, str] = {}  # index -> JSON text, for messages compared by type too
        self._messages: list[Message] = []
        self._ids = CallIds()
        self._unreadable: dict[str, tuple[int, str]] = {}  # call id -> (message index, reason)
        self._pairing = Pairing()  # the converted messages' calls and results: fed what each convert added

    def convert(self, messages: Sequence[Any], *, keep: int | None = None) -> Trajectory:
        """``messages`` as a :class:`Trajectory`, reusing the unchanged prefix (``keep``: what
        :meth:`unchanged_prefix` just said of this very list, to spare comparing it again)."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise FormatError(f"openai_chat messages: expected a list, got {type(messages).__name__}")
        if keep is None:
            keep = self.unchanged_prefix(messages)
        if keep < len(self._messages):
            self._truncate(keep)
        for index in range(keep, len(messages)):
            self._append(messages[index], index)
        self._pairing.feed_all(self._messages[self._pairing.count :])  # the new messages, in one pass
        return Trajectory.model_construct(messages=PairedMessages(self._messages, self._pairing.snapshot()))

    def call_index(self, call_id: str) -> int | None:
        """The index of the message that carries call ``call_id``, if any."""
        return self._ids.calls.get(call_id)

    def result_index(self, call_id: str) -> int | None:
        """The index of the message that answers call ``call_id``, if any."""
        return self._ids.results.get(call_id)

    def unchanged_prefix(self, messages: Sequence[Any]) -> int:
        """How many leading messages of ``messages`` equal what was converted (by type too, where it matters)."""
        known = min(len(messages), len(self._snapshots))
        if self.tail_only and known == len(self._snapshots) and known and self._same_tail(messages, known - 1):
            return known
        first = known
        head = messages[:known] if type(messages) is list else list(messages[:known])
        if head != (self._snapshots if known == len(self._snapshots) else self._snapshots[:known]):  # one C pass
            for index in range(known):
                item = messages[index]
                if (item if isinstance(item, dict) else plain(item)) != self._snapshots[index]:
                    first = index
                    break
        for index in self._strict:
            if index >= first:
                break
            item = messages[index]
            if _typed_json(item if isinstance(item, dict) else plain(item)) != self._strict[index]:
                return index
        return first

    def _same_tail(self, messages: Sequence[Any], index: int) -> bool:
        item = messages[index]
        if (item if isinstance(item, dict) else plain(item)) != self._snapshots[index]:
            return False
        strict = self._strict.get(index)
        return strict is None or _typed_json(item if isinstance(item, dict) else plain(item)) == strict

    def _truncate(self, keep: int) -> None:
        del self._snapshots[keep:], self._messages[keep:]
        self._strict = {index: text for index, text in self._strict.items() if index < keep}
        self._ids = CallIds()
        self._unreadable = {k: v for k, v in self._unreadable.items() if v[0] < keep}
        for index, message in enumerate(self._messages):
            check_message(message, index, self._ids)
        self._pairing = Pairing()  # the kept messages are paired again by the next convert

    def _append(self, item: Any, index: int) -> None:
        snapshot = plain(item)
        unreadable: dict[str, str] | None = {} if self.lenient_arguments else None
        message = read_plain_message(snapshot, index, unreadable=unreadable)  # the snapshot is plain already
        check_message(message, index, self._ids)
        for call_id, reason in (unreadable or {}).items():
            self._unreadable[call_id] = (index, reason)
        refused = self._unreadable.get(message.tool_call_id or "")
        if refused is not None and not message.is_error:
            raise FormatError(
                f"message {index}: call {message.tool_call_id!r} (message {refused[0]}) has unreadable arguments "
                f"but a successful result; refused ({refused[1]})"
            )
        self._snapshots.append(snapshot)
        if _has_typed_values(snapshot):
            self._strict[index] = _typed_json(snapshot)
        self._messages.append(message)


def _has_typed_values(item: Any) -> bool:
    """Whether equality alone could miss a change that matters (``1`` -> ``True`` -> ``1.0``)."""
    if not isinstance(item, dict):
        return True
    if "is_error" in item:
        return True
    calls = item.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("arguments", ""), str):
                return True
    return False


def _typed_json(item: Any) -> str:
    try:
        return json.dumps(item, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(item)
