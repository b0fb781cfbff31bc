"""A store wrapper that counts failures for ``/metrics`` and changes nothing else.

Every call goes to the wrapped store; an exception is counted under the
operation's name and raised again, so the guard and the executor fail closed
exactly as they do without the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from policyguard.enforcement.scoped import any_denied
from policyguard.enforcement.store import EffectClaim, EffectRecord
from policyguard.session import NewEvent, SessionError, SessionEvent, SessionHold

from .metrics import Metrics

T = TypeVar("T")


class MeteredStore:
    """The server's view of the shared store: :class:`NonceStore`, :class:`Ledger` and
    :class:`~policyguard.session.SessionStore`, counted (an evicted or full session is an answer, not an error)."""

    def __init__(self, store: Any, metrics: Metrics) -> None:
        self.inner = store
        self._metrics = metrics

    def _run(self, operation: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except SessionError:
            raise
        except Exception:
            self._metrics.store_error(operation)
            raise

    # NonceStore
    def consume(self, nonce: str, expires_at: float) -> bool:
        return self._run("consume", lambda: bool(self.inner.consume(nonce, expires_at)))

    def deny(self, call_id: str) -> None:
        self._run("deny", lambda: self.inner.deny(call_id))

    def is_denied(self, call_id: str) -> bool:
        return self._run("is_denied", lambda: bool(self.inner.is_denied(call_id)))

    def any_denied(self, keys: Sequence[str]) -> bool:
        return self._run("is_denied", lambda: any_denied(self.inner, keys))

    def purge_expired(self, now: float) -> int:
        return self._run("purge_expired", lambda: int(self.inner.purge_expired(now)))

    # SessionStore
    def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[SessionEvent]:
        return self._run("append_events", lambda: list(self.inner.append_events(session_id, events)))

    def session_events(self, session_id: str, after: int = 0) -> list[SessionEvent]:
        return self._run("session_events", lambda: list(self.inner.session_events(session_id, after)))

    def hold(self, session_id: str, timeout: float) -> SessionHold | None:
        """The inner store's hold (a lock that stayed taken is an answer; a release never raises, so is not counted)."""
        held: SessionHold | None = self._run("hold", lambda: self.inner.hold(session_id, timeout))
        return held

    # Ledger
    def begin_effect(
        self,
        idempotency_key: str,
        *,
        tool: str,
        transaction_id: str,
        amount: float,
        currency: str | None,
        args_sha256: str,
        enforce_captured: bool = False,
    ) -> EffectClaim:
        return self._run(
            "begin_effect",
            lambda: self.inner.begin_effect(
                idempotency_key,
                tool=tool,
                transaction_id=transaction_id,
                amount=amount,
                currency=currency,
                args_sha256=args_sha256,
                enforce_captured=enforce_captured,
            ),
        )

    def complete_effect(self, idempotency_key: str, result_json: str) -> None:
        self._run("complete_effect", lambda: self.inner.complete_effect(idempotency_key, result_json))

    def lookup(self, idempotency_key: str) -> EffectRecord | None:
        return self._run("lookup", lambda: self.inner.lookup(idempotency_key))

    def total(self, transaction_id: str, tool: str | None = None) -> float:
        return self._run("total", lambda: float(self.inner.total(transaction_id, tool)))

    def captured(self, transaction_id: str) -> float | None:
        return self._run("captured", lambda: self.inner.captured(transaction_id))

    def set_captured(self, transaction_id: str, amount: float) -> None:
        self._run("set_captured", lambda: self.inner.set_captured(transaction_id, amount))

    def entries(self) -> list[EffectRecord]:
        return self._run("entries", lambda: list(self.inner.entries()))
