"""The README's Approvals example runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.docblocks import doc_block


def test_the_readme_approvals_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = doc_block("docs/approvals.md", "approvals")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/approvals.md#approvals", "exec"), namespace)  # noqa: S102
    namespace["queue"].close()  # type: ignore[attr-defined]
    first, again, changed = out.getvalue().splitlines()
    assert re.fullmatch(r"escalate apr-[0-9a-f]{24}", first)
    assert again == "allow " + first.split()[1]
    assert changed == "escalate"
    assert (tmp_path / "approvals.db").exists()
