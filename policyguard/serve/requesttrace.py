"""The server's trace as one request sees it."""

from __future__ import annotations

from typing import Any

from policyguard.audit.trace import Trace


class RequestTrace(Trace):
    """The server's trace as one request sees it: every event also carries the request's fields.

    It writes through the shared trace (one writer, one logical clock per file);
    ``principal``, ``replica`` and ``request_id`` are fields readers ignore or
    use, not new event kinds, so ``policyguard audit`` reads the file unchanged.
    """

    def __init__(self, base: Trace, **fields: Any) -> None:  # no file of its own: no super().__init__
        self._base = base
        self._fields = {k: v for k, v in fields.items() if v is not None}
        self.path = base.path

    @property
    def events(self) -> list[dict[str, Any]]:
        return self._base.events

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self._base.emit(event, **{**self._fields, **fields})

    def sync(self) -> None:
        self._base.sync()

    def close(self) -> None:  # the shared trace outlives the request
        return None
