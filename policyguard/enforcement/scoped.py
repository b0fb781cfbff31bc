"""The keys a deny is stored under: a call's identity, not its bare id (deny wins, nonces).

Agents number their calls per conversation, and many stacks per turn
(``call_0`` every turn), so a call id alone does not name a call. A deny is
keyed by the call's identity: the session (if any), the call id, the tool, the
canonical arguments' sha256, and its *place*, which issuance of the call this
is (a string the guard passes in, see :func:`policyguard.guard.calls.call_place`).
A deny of conversation A's ``call_5`` does not refuse conversation B's, and a
deny of turn 1's ``call_0`` does not refuse turn 3's ``call_0`` that is another
call (another tool, other arguments, or a later message).

A call with no known place (``""``) is the stricter case: its deny refuses the
identity at every place, and it is refused by a deny of the identity at any
place, so a re-check that shows the call where the first check did not (or
the reverse) is still the same, denied call. A deny under the bare call id
(:func:`deny_key`: a reviewer's refusal through the approval queue, or a store
written before identities) still refuses every call with that id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

IDENTITY_PREFIX = "id1:"
"""Marks a deny key that names a call's identity (a digest), not a bare call id."""


def deny_key(session_id: str | None, call_id: str) -> str:
    """The bare-id key: a deny (or a consumed grant) of ``call_id`` in ``session_id``, whatever the call was.

    Inside a session, the session id and the call id, length-prefixed so no pair
    of them can spell another pair; without a session, the call id.
    """
    if session_id is None:
        return call_id
    return f"s{len(session_id)}:{session_id}:{call_id}"


@dataclass(frozen=True)
class CallIdentity:
    """One issued call, as deny wins tells calls apart (see the module doc)."""

    session_id: str | None
    call_id: str
    tool: str
    args_sha256: str
    place: str = ""

    def deny_records(self) -> tuple[str, ...]:
        """The keys a deny of this call writes: its own place and the any-place marker, or the no-place key."""
        if self.place:
            return (self._key("at", self.place), self._key("any"))
        return (self._key("unplaced"),)

    def deny_lookups(self) -> tuple[str, ...]:
        """The keys any one of which refuses this call: a deny of its bare id, of its identity with no
        place, and of its own place (with no place of its own: of its identity at any place)."""
        own = self._key("at", self.place) if self.place else self._key("any")
        return (deny_key(self.session_id, self.call_id), self._key("unplaced"), own)

    def _key(self, *where: str) -> str:
        fields = [self.session_id, self.call_id, self.tool, self.args_sha256, *where]
        digest = hashlib.sha256(json.dumps(fields, ensure_ascii=True).encode()).hexdigest()
        return IDENTITY_PREFIX + digest


class DenyReader(Protocol):
    """What reads deny records (a :class:`~policyguard.enforcement.store.NonceStore`)."""

    def is_denied(self, call_id: str) -> bool: ...


def any_denied(store: DenyReader, keys: Sequence[str]) -> bool:
    """Whether a deny is recorded under any of ``keys`` (a call's :meth:`CallIdentity.deny_lookups`): one
    query where the store has ``any_denied`` (the stores here do), else one ``is_denied`` per key."""
    batch = getattr(store, "any_denied", None)
    if batch is not None:
        return bool(batch(keys))
    return any(store.is_denied(key) for key in keys)
