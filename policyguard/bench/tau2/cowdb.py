"""tau2 databases that share one validated copy until a record is touched.

Building a tau2 environment validates the whole domain database (airline: 2.7 MB
of JSON, about 150 ms idle). The replay needs a fresh database for every task
that writes, about sixty of them. Instead, the database is validated once
(:class:`SharedTables`) and each fresh one is a :class:`CopyOnAccess` view of its
tables: a record is deep-copied the first time a tool reads it *by key*
(``table[key]``, ``table.get(key)``), and that copy is what the environment sees
and changes from then on.

Why this is faithful to tau2: tau2's tools change a record only after reading it
by key (``self.db.reservations[reservation_id]``, ``_get_user``...) or by
storing a new one (``table[key] = record``); scans (``.values()``,
``.items()``, as in flight search or user lookup) only read. Should a tool ever
change a record reached by a scan, the pristine copy would change for every later
database: :meth:`SharedTables.check_untouched` compares the pristine tables'
hash with the one taken at build time, and the replay calls it at the end of a
run and refuses its result if they differ.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from policyguard.errors import PolicyGuardError

DB = TypeVar("DB")


class CopyOnAccess(dict[str, Any]):
    """One table of a fresh database: pristine records until read by key, private copies after."""

    __slots__ = ("_own",)

    def __init__(self, pristine: dict[str, Any]) -> None:
        super().__init__(pristine)
        self._own: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self._own:
            value = copy.deepcopy(value)
            dict.__setitem__(self, key, value)
            self._own.add(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __setitem__(self, key: str, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        """A plain dict of private copies: nothing shared with the pristine table leaks out."""
        return {key: self[key] for key in list(self)}

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(dict.__getitem__(self, key), memo) for key in self}

    def __reduce__(self) -> Any:
        return (dict, (self.copy(),))


class PristineChanged(PolicyGuardError):
    """A tool changed a shared record without reading it by key: the replay's databases were not independent."""


class SharedTables:
    """One validated tau2 database whose tables back any number of fresh copies."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._tables = {name: value for name, value in db.__dict__.items() if isinstance(value, dict)}
        self._hash: str = db.get_hash()

    def fresh(self) -> Any:
        """A database equal to the pristine one, whose changes stay its own."""
        fields = {
            name: CopyOnAccess(value) if name in self._tables else copy.deepcopy(value)
            for name, value in self._db.__dict__.items()
        }
        return type(self._db).model_construct(**fields)

    def check_untouched(self) -> None:
        """Raise :class:`PristineChanged` if any shared record changed since the tables were built."""
        if self._db.get_hash() != self._hash:
            raise PristineChanged(
                "a tau2 tool changed a database record it reached by a scan; fresh databases shared it, "
                "so this run's results are not independent (report this with the tau2 version)"
            )
