"""The README and the documentation site: every code block runs in a test or says why not, and the site builds.

A page the tests cannot see drifts from the code; these tests make the link explicit. Each fenced
block carries a marker (``tests/docblocks.py``); ``test:`` blocks are run by the test that names
them, and the README's two commands are walked here, top to bottom.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import policyguard
from tests.docblocks import ROOT, Block, blocks, doc_block, pages

PAGES = [page for page in pages() if page.exists()]
TESTS = [path for path in (ROOT / "tests").rglob("*.py") if path.name != "docblocks.py"]


def _all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def test_every_code_block_is_run_by_a_test_or_says_why_not() -> None:
    unmarked = [f"{b.page}:{b.line} ({b.lang or 'no language'})" for b in _all_blocks() if b.marker is None]
    assert unmarked == []


def test_no_page_has_two_blocks_of_one_test_name() -> None:
    seen: dict[tuple[str, str], int] = {}
    for block in _all_blocks():
        if block.marker == "test":
            key = (block.page, block.value or "")
            seen[key] = seen.get(key, 0) + 1
    assert {key: count for key, count in seen.items() if count > 1} == {}


def test_every_test_marker_is_read_by_a_test_of_that_page() -> None:
    """A `test:` name must occur in a test file that names the page: a marker nobody reads is a lie."""
    sources = {path: path.read_text(encoding="utf-8") for path in TESTS}
    unread = []
    for block in _all_blocks():
        if block.marker != "test":
            continue
        readers = [p for p, text in sources.items() if block.page in text and f'"{block.value}"' in text]
        if not readers:
            unread.append(f"{block.page}:{block.line} test: {block.value}")
    assert unread == []


def test_every_reason_not_to_run_a_block_is_a_sentence() -> None:
    short = [f"{b.page}:{b.line}" for b in _all_blocks() if b.marker == "not run" and len((b.value or "").split()) < 5]
    assert short == []


# ------------------------------------------------------------------------------------ the README


def _steps(name: str) -> list[str]:
    return [step.strip() for step in doc_block("README.md", name).strip().split("&&")]


def test_the_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_two = [b.value for b in blocks(ROOT / "README.md")[:2]]
    assert first_two == ["first-command", "test-command"]
    assert text.index("<!-- test: first-command -->") < text.index("\n## ")


def test_the_first_command_installs_the_core_alone_and_runs_the_demo() -> None:
    """No extra: the demo must work on the 23-package core, with no key and no server."""
    assert _steps("first-command") == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install -c constraints.txt -e .",
        "policyguard demo",
    ]


def test_the_test_command_is_what_ci_runs() -> None:
    steps = _steps("test-command")
    assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    command = " && ".join(steps[2:])
    assert command == "pip install -c constraints.txt -e '.[dev,tau2]' && python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    # verbatim, followed only by what makes a failed install end the run
    assert any(line == command or line.startswith(command + " || { ") for line in ci)


@pytest.mark.slow
def test_the_first_commands_demo_runs_in_a_fresh_directory(tmp_path: Path) -> None:
    """`policyguard demo` as the README types it: exit 0, the three outcomes, files in ./policyguard-demo."""
    command = _steps("first-command")[-1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    run = subprocess.run(
        [sys.executable, "-m", *shlex.split(command)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for outcome in ("allow", "block", "escalate"):
        assert re.search(rf"\b{outcome}", run.stdout, re.I), f"the demo shows no {outcome}:\n{run.stdout}"
    assert (tmp_path / "policyguard-demo" / "trace.jsonl").is_file()
    assert (tmp_path / "policyguard-demo" / "approvals.db").is_file()
    printed = {line.rstrip() for line in run.stdout.splitlines()}
    shown = [line for line in doc_block("README.md", "demo-output").splitlines() if line.strip()]
    assert [line for line in shown if line not in printed] == []
    assert doc_block("docs/getting-started.md", "demo").strip() == command


def test_the_readmes_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links to nothing"
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (ROOT / t).exists()]
    assert missing == []


# ---------------------------------------------------------------------------------- the site


def _nav_pages(nav: list[object]) -> list[str]:
    found: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found += _nav_pages(value)
        else:
            found.append(str(value))
    return found


def test_every_page_of_the_site_is_in_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    in_nav = set(_nav_pages(config["nav"]))
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk - in_nav == set() and in_nav - on_disk == set()


def test_the_api_reference_documents_every_public_name() -> None:
    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: policyguard\.[\w.]+\.(\w+)$", text, re.M))
    assert documented == set(policyguard.__all__) - {"__version__"}


def test_the_trace_format_example_is_a_clean_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from policyguard.cli import main

    trace = tmp_path / "example.jsonl"
    trace.write_text(doc_block("docs/trace-format.md", "trace-example"), encoding="utf-8")
    assert main(["audit", str(trace)]) == 0
    assert "1 executes, 1 effects, 0 violations" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="needs mkdocs (extra 'docs' or 'dev')")
def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, a missing page or an API name that no longer exists fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8").count("Guard") > 10
