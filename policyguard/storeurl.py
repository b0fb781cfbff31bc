"""Choose a store by URL: ``sqlite:///path.db``, ``sqlite:///:memory:`` (later: ``postgresql://...``).

One string configures the store everywhere a store is chosen (``--store URL`` on
the command line, ``open_store(url)`` in code), so a deployment moves from one
file to a shared database by changing a setting, not code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .errors import ConfigError
from .store import SQLiteStore

if TYPE_CHECKING:  # pragma: no cover
    from .approvalqueue import SQLiteApprovalQueue

_SQLITE = "sqlite://"


def open_store(url: str, *, synchronous: Literal["FULL", "NORMAL"] = "FULL") -> SQLiteStore:
    """The store ``url`` names; a :class:`ConfigError` naming the URL when it names none.

    ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` open (and
    create) a SQLite file; ``sqlite:///:memory:`` a private in-memory database.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError("store URL: empty; use sqlite:///path.db")
    if url.startswith(_SQLITE):
        path = url[len(_SQLITE) :]
        if not path.startswith("/") or path == "/":
            raise ConfigError(f"store URL {url!r}: a SQLite URL is sqlite:///path.db (three slashes)")
        return SQLiteStore(path[1:], synchronous=synchronous)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise ConfigError(f"store URL {url!r}: unknown scheme {scheme!r}; use sqlite:///path.db")


def open_approvals(url: str) -> SQLiteApprovalQueue:
    """The approval queue kept in the store ``url`` names (its own tables, beside nonces and ledger).

    Same URLs and errors as :func:`open_store`.
    """
    from .approvalqueue import SQLiteApprovalQueue

    return SQLiteApprovalQueue(open_store(url))
