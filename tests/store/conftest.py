"""One store contract, several backends: ``store`` is each of them in turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyguard.enforcement.store import SQLiteStore, Store

BACKENDS = ["sqlite-memory", "sqlite-file", "sqlite-group-commit", "postgres"]


def open_backend(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Store:
    """A fresh, empty store of ``backend``; closed after the test."""
    store: Store
    if backend == "postgres":
        from policyguard.enforcement.pgstore import PostgresStore

        store = PostgresStore(request.getfixturevalue("pg_url"))
    else:
        path = ":memory:" if backend == "sqlite-memory" else str(tmp_path / "s.db")
        store = SQLiteStore(path, group_commit=backend == "sqlite-group-commit")
    request.addfinalizer(store.close)
    return store


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return open_backend(request, request.param, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL that every process of a test can open (a SQLite file or a fresh PostgreSQL schema)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'gate.db'}"
