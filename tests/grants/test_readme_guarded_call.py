"""The README's guarded-call example runs as written and prints what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docblocks import doc_block


def test_the_guarded_call_example_runs_and_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = doc_block("docs/production/grants.md", "guarded-call")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/production/grants.md", "exec"), {"__name__": "readme_guarded_call"})
    expected = [line.split("# ", 1)[1] for line in code.splitlines() if line.startswith("print(")]
    assert capsys.readouterr().out.splitlines() == expected
    assert (tmp_path / "gate.db").exists()
