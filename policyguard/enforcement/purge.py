"""Forget spent grant nonces once their grants have expired, from the consumer side.

Every verified grant leaves its nonce in the store so a replay is refused; a
nonce whose grant has expired protects nothing (the verifier refuses an expired
grant before it looks at the nonce), so keeping it only grows the store.
:class:`NoncePurger` calls the store's ``purge_expired`` every ``every``
consumes or ``interval_s`` seconds, whichever comes first, from the thread that
just consumed a nonce. The store itself never purges on its own.

``margin_s`` keeps nonces that long past their expiry: several processes may
share one store, and one whose clock runs ahead must not forget a nonce that
another, behind it, would still accept a grant for.
A failed purge is recorded (``last_error``) and retried at the next interval; it
never fails the verification that triggered it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .store import NonceStore

DEFAULT_EVERY = 1000
DEFAULT_INTERVAL_S = 60.0
DEFAULT_MARGIN_S = 300.0


class NoncePurger:
    """Calls ``store.purge_expired`` now and then; :meth:`tick` after each consumed nonce."""

    def __init__(
        self,
        store: NonceStore,
        *,
        clock: Callable[[], float] = time.time,
        every: int = DEFAULT_EVERY,
        interval_s: float = DEFAULT_INTERVAL_S,
        margin_s: float = DEFAULT_MARGIN_S,
    ) -> None:
        if every < 1 or interval_s <= 0 or margin_s < 0:
            raise ValueError("every must be >= 1, interval_s > 0 and margin_s >= 0")
        self.store = store
        self.every = every
        self.interval_s = interval_s
        self.margin_s = margin_s
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0
        self._last = clock()
        self.purged = 0
        """Nonces forgotten so far."""
        self.last_error: str | None = None

    def tick(self) -> None:
        """Count one consume; purge when ``every`` consumes or ``interval_s`` seconds have passed."""
        now = self._clock()
        with self._lock:
            self._count += 1
            if self._count < self.every and now - self._last < self.interval_s:
                return
            self._count = 0
            self._last = now
        self.purge(now)

    def purge(self, now: float | None = None) -> int:
        """Forget the nonces that expired more than ``margin_s`` before ``now``; how many were forgotten."""
        now = self._clock() if now is None else now
        try:
            removed = self.store.purge_expired(now - self.margin_s)
        except Exception as exc:  # the consume it follows succeeded; a purge is housekeeping
            self.last_error = f"{type(exc).__name__}: {exc}"
            return 0
        self.last_error = None
        self.purged += removed
        return removed
