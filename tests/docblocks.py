"""The code blocks of the README and the documentation site, as the tests read them.

Every fenced block on a page is preceded by one marker line:

* ``<!-- test: NAME -->``: a test reads it with :func:`doc_block` ``(page, "NAME")`` and runs it;
* ``<!-- not run: REASON -->``: no test runs it, and the reason says why (a key, a browser...).

``tests/docs/test_docs.py`` refuses a block with neither, and a ``test:`` name no test reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(`{3,})([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!-- (test|not run): (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    marker: str | None  # "test" or "not run"
    value: str | None  # the test name or the reason


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "examples" / "README.md"]


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(
            Block(
                page=str(page.relative_to(ROOT)),
                line=line,
                lang=match.group(2),
                code=match.group(3),
                marker=marker.group(1) if marker else None,
                value=marker.group(2) if marker else None,
            )
        )
    return found


def doc_block(page: str, name: str) -> str:
    """The code of the block marked ``<!-- test: name -->`` on ``page`` (a path from the repository root)."""
    matches = [b for b in blocks(ROOT / page) if b.marker == "test" and b.value == name]
    assert len(matches) == 1, f"{page} has {len(matches)} blocks marked 'test: {name}' (one expected)"
    return matches[0].code


def expected_lines(code: str) -> list[tuple[str, list[str]]]:
    """A shell block as (command, the ``# ...`` lines under it that its output must show)."""
    steps: list[tuple[str, list[str]]] = []
    for raw in code.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            assert steps, f"an expected-output comment before any command: {line!r}"
            steps[-1][1].append(line[1:].strip())
        else:
            steps.append((line, []))
    return steps


def shows(output: str, expected: str) -> bool:
    """``expected`` occurs as one line of ``output``; ``...`` in it stands for any text."""
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return any(re.fullmatch(pattern, line.strip()) for line in output.splitlines())
