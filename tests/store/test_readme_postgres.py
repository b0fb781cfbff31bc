"""The README's "PostgreSQL store" example runs as written, against the test server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docblocks import doc_block

EXAMPLE_URL = "postgresql://guard@127.0.0.1:5432/policyguard"


def _example() -> str:
    return doc_block("docs/production/postgresql.md", "postgresql")


def test_the_readme_postgres_example_runs(pg_url: str) -> None:
    code = _example()
    assert EXAMPLE_URL in code
    exec(compile(code.replace(EXAMPLE_URL, pg_url), "README.md", "exec"), {})


def test_the_readme_example_runs_on_sqlite_too(tmp_path: Path) -> None:
    code = _example().replace(f'"{EXAMPLE_URL}"', repr(f"sqlite:///{tmp_path / 'guard.db'}"))
    exec(compile(code, "README.md", "exec"), {})


def test_the_readme_example_is_refused_when_the_ceiling_would_be_exceeded(pg_url: str) -> None:
    """The example's assertions are live: a store that let the second claim through fails it."""
    code = _example().replace(EXAMPLE_URL, pg_url).replace("amount=40.0", "amount=30.0")
    with pytest.raises(AssertionError):
        exec(compile(code, "README.md", "exec"), {})
