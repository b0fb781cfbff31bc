"""Open the approval queue kept in a store's database, by the store's URL.

The same URLs as :func:`policyguard.enforcement.storeurl.open_store`: the
queue's tables sit beside the nonces and the ledger, so replicas sharing the
database share the queue.
"""

from __future__ import annotations

from policyguard.enforcement.store import SQLiteStore
from policyguard.enforcement.storeurl import open_store
from policyguard.errors import ConfigError

from .queue import SQLApprovalQueue


def open_approvals(url: str, *, create: bool = True) -> SQLApprovalQueue:
    """The approval queue kept in the store ``url`` names (its own tables, beside nonces and ledger).

    Same URLs, errors and ``create`` as :func:`open_store`: ``sqlite:///path.db``
    or ``postgresql://...`` (replicas sharing the database share the queue).
    """
    from .queue import SQLiteApprovalQueue

    store = open_store(url, create=create)
    if isinstance(store, SQLiteStore):
        return SQLiteApprovalQueue(store)
    from policyguard.enforcement.pgstore import PostgresStore

    from .pgqueue import PostgresApprovalQueue

    if not isinstance(store, PostgresStore):  # pragma: no cover - open_store returns one of the two
        store.close()
        raise ConfigError(f"store URL: no approval queue for a {type(store).__name__}")
    return PostgresApprovalQueue(store)
