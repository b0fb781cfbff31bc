"""The README's guarded-call example runs as written and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_guarded_call_example_runs_and_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = re.search(r"## Guarded calls:.*?```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "the README lost its guarded-call example"
    code = block.group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_guarded_call"})
    expected = [line.split("# ", 1)[1] for line in code.splitlines() if line.startswith("print(")]
    assert capsys.readouterr().out.splitlines() == expected
    assert (tmp_path / "gate.db").exists()
