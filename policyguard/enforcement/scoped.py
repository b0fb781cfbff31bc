"""Call ids scoped to their conversation, for the stores that remember a call (deny wins, nonces).

Agents number their calls per conversation (``call_1``, ``call_2``...), so a
call id alone does not name a call across conversations: a deny of
conversation A's ``call_5`` must not refuse conversation B's. Inside a session
the key is the session id and the call id, length-prefixed so no pair of them
can spell another pair; without a session it is the call id, as before.
"""

from __future__ import annotations


def deny_key(session_id: str | None, call_id: str) -> str:
    """The key a deny (or a consumed grant) of ``call_id`` in ``session_id`` is stored under."""
    if session_id is None:
        return call_id
    return f"s{len(session_id)}:{session_id}:{call_id}"
