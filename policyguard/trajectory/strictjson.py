"""The one JSON reader for what PolicyGuard reads from outside: a key named twice is refused.

``{"reservation_id": "AIXC49", "reservation_id": "NO6JO3"}`` parses in Python
(the last value wins) but not the same way everywhere: another language's
parser, or the executor behind the guard, may act on the first. The gate must
judge exactly what will run, so call files, dialogues, tool arguments and
results, request bodies, traces, tool lists and grant tokens are all read with
:func:`loads`, which refuses an object that names a key twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class DuplicateKeyError(ValueError):
    """An object names ``key`` twice; the message is one line naming the key."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"the key {key!r} appears twice in one object")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object, or :class:`DuplicateKeyError`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


# json.loads builds a new decoder on every call given a hook (1.8 of 3.1 us for a small object);
# this one is built once. Its configuration is the one json.loads would build for a plain str.
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys)


def loads(
    text: str | bytes,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    parse_float: Callable[[str], Any] | None = None,
) -> Any:
    """:func:`json.loads` that refuses duplicate keys (:class:`DuplicateKeyError`, a ``ValueError``)."""
    if type(text) is str and parse_constant is None and parse_float is None and not text.startswith("\ufeff"):
        return _DECODER.decode(text)  # what json.loads does for a str without a byte order mark
    return json.loads(text, object_pairs_hook=unique_keys, parse_constant=parse_constant, parse_float=parse_float)
