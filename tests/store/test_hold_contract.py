"""Every store that ``open_store`` returns, and the server's metered view of it, holds sessions.

The full behaviour (threads, processes, timeouts, a killed holder) is in
``tests/session/test_hold.py``; here each store backend, group commit included,
keeps the contract, and ``serve``'s :class:`MeteredStore` passes the hold
through and counts a store error like any other operation's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from policyguard.enforcement.store import LedgerUnavailable, SQLiteStore, Store
from policyguard.serve.metered import MeteredStore
from policyguard.serve.metrics import Metrics
from policyguard.session import SessionStore


def test_each_backend_gives_a_session_to_one_holder_at_a_time(store: Store) -> None:
    hold = store.hold("s1", 0)
    assert hold is not None
    assert store.hold("s1", 0) is None
    other = store.hold("s2", 0)
    assert other is not None
    hold.release()
    hold.release()
    again = store.hold("s1", 0.5)
    assert again is not None
    again.release()
    other.release()


def test_the_metered_store_passes_the_hold_through(tmp_path: Path) -> None:
    metrics = Metrics()
    inner = SQLiteStore(str(tmp_path / "s.db"))
    metered = MeteredStore(inner, metrics)
    assert isinstance(metered, SessionStore)
    hold = metered.hold("s1", 0)
    assert hold is not None and metered.hold("s1", 0) is None
    hold.release()
    again = metered.hold("s1", 0)
    assert again is not None
    again.release()
    assert dict(metrics.store_errors) == {}
    inner.close()


def test_the_metered_store_counts_a_hold_that_fails(tmp_path: Path) -> None:
    metrics = Metrics()
    inner = SQLiteStore(str(tmp_path / "s.db"))
    (tmp_path / "s.db.holds").mkdir()  # the lock file cannot be opened
    with pytest.raises(LedgerUnavailable):
        MeteredStore(inner, metrics).hold("s1", 0)
    assert dict(metrics.store_errors) == {"hold": 1}
    inner.close()
