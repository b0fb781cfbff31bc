"""Choose a store by URL: ``sqlite:///path.db``, ``sqlite:///:memory:`` or ``postgresql://...``.

One string configures the store everywhere a store is chosen (``--store URL`` on
the command line, ``open_store(url)`` in code), so a deployment moves from one
file to a shared database by changing a setting, not code. The approval queue
in the same database opens with :func:`policyguard.approvals.url.open_approvals`.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from policyguard.distribution import install_hint
from policyguard.errors import ConfigError

from .store import SQLiteStore, Store

_SQLITE = "sqlite://"
_POSTGRES = ("postgresql://", "postgres://")
_USAGE = "use sqlite:///path.db or postgresql://user@host:5432/dbname"


def open_store(
    url: str, *, synchronous: Literal["FULL", "NORMAL"] = "FULL", create: bool = True, group_commit: bool = False
) -> Store:
    """The store ``url`` names; a :class:`ConfigError` naming the URL when it names none.

    ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` open (and
    create) a SQLite file; ``sqlite:///:memory:`` a private in-memory database;
    ``synchronous`` applies to SQLite only; so does ``group_commit`` (files only: concurrent writes share
    one transaction and one fsync, see :mod:`policyguard.enforcement.groupcommit`), for a process whose
    threads write at once, such as ``policyguard serve``. With ``create=False`` a SQLite file
    that does not exist is a :class:`ConfigError` and nothing is created: a
    command that only reads or decides (``approvals``, ``review``) must not turn
    a mistyped path into a new, empty store. ``postgresql://`` (or
    ``postgres://``) URLs open a :class:`~policyguard.enforcement.pgstore.PostgresStore`
    (extra ``[postgres]``); an unreachable server raises ``LedgerUnavailable``.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(f"store URL: empty; {_USAGE}")
    if url.startswith(_SQLITE):
        path = url[len(_SQLITE) :]
        if not path.startswith("/") or path == "/":
            raise ConfigError(f"store URL {url!r}: a SQLite URL is sqlite:///path.db (three slashes)")
        if not create and path[1:] != ":memory:" and not os.path.isfile(path[1:]):
            raise ConfigError(
                f"store URL {url!r}: no such store ({path[1:]} does not exist; the guard creates it "
                "when it first records something)"
            )
        file = path[1:] != ":memory:"
        return SQLiteStore(path[1:], synchronous=synchronous, group_commit=group_commit and file)
    if url.startswith(_POSTGRES):
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401

            from .pgstore import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"store URL postgresql://...: needs psycopg and psycopg_pool; {install_hint('postgres')}"
            ) from exc
        return PostgresStore(url)
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        raise ConfigError(f"store URL: not a scheme://... URL; {_USAGE}")  # the text is not echoed: it may be a secret
    raise ConfigError(f"store URL {scheme}://...: unknown scheme {scheme!r}; {_USAGE}")
