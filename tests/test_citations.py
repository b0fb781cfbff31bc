"""User-facing text cites what a reader can find: no internal seed or issue numbers, and the paper by its arXiv id."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from policyguard.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
ARXIV = "arXiv 2606.29225"
UNFOLLOWABLE = re.compile(r"\bseeds? 0\d\d\b|\bseed-0\d\d\b|\bissues? \d+\b|(?<![\w/\[])#\d{2,}\b", re.IGNORECASE)


def _documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "benchmarks").rglob("README.md")),
    ]


def _docstrings() -> dict[str, str]:
    out = {}
    for path in sorted((ROOT / "policyguard").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if doc:
            out[str(path.relative_to(ROOT))] = doc
    return out


def _help_text() -> str:
    parts: list[str] = []

    def walk(parser: object) -> None:
        for action in parser._actions:  # type: ignore[attr-defined]
            parts.append(action.help or "")
            for child in (getattr(action, "choices", None) or {}).values() if hasattr(action, "add_parser") else ():
                parts.append(child.description or "")
                walk(child)

    walk(build_parser())
    return "\n".join(parts)


@functools.cache
def _texts() -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _documents()}
    texts.update(_docstrings())
    texts["policyguard --help (all commands)"] = _help_text()
    return texts


@pytest.mark.parametrize("name", sorted(_texts()))
def test_no_internal_seed_or_issue_numbers(name: str) -> None:
    text = _texts()[name]
    # upstream tau2-bench issues are cited as links: [156](https://github.com/sierra-research/tau2-bench/issues/156)
    text = re.sub(r"\[\d+\]\(https://github\.com/[^)]+\)", "", text)
    assert UNFOLLOWABLE.findall(text) == []


@pytest.mark.parametrize("name", sorted(_texts()))
def test_the_paper_is_cited_by_its_arxiv_id(name: str) -> None:
    text = _texts()[name]
    if re.search(r"\bpaper\b|\bappendix\b", text, re.IGNORECASE):
        assert ARXIV in text
