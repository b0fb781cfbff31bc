"""Every command line option says what it does; the model and mode options name every accepted value."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from policyguard.cli import build_parser

MODEL_SPECS = ("openai-sdk:", "anthropic-sdk:", "scripted:FILE.json", "LiteLLM")


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))


def _command(path: str) -> argparse.ArgumentParser:
    return dict(_commands(build_parser()))[path]


def _help_of(path: str, option: str) -> str:
    for action in _command(path)._actions:
        if option in action.option_strings:
            return action.help or ""
    raise AssertionError(f"{path} has no {option}")


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        f"{path}: {action.option_strings or action.dest}"
        for path, parser in _commands(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction) and not action.help
    ]
    assert missing == []


@pytest.mark.parametrize("path", ["verify", "checklist generate", "mcp-proxy"])
def test_model_help_lists_every_spec_kind(path: str) -> None:
    text = _help_of(path, "--model")
    for kind in (*MODEL_SPECS, "none"):
        assert kind in text, kind


def test_mode_help_says_what_the_verifier_sees_in_each_mode() -> None:
    text = _help_of("verify", "--mode")
    for mode, sees in (
        ("checklist =", "policy + checklist + whole dialogue"),
        ("raw =", "no checklist"),
        ("raw_traj =", "only the tool calls and results"),
        ("checklist_only =", "no policy text"),
    ):
        assert mode in text and sees in text, mode


@pytest.mark.parametrize("option", ["--trials", "--concurrency", "--max-steps", "--config", "--split"])
def test_bench_tau2_run_options_are_explained(option: str) -> None:
    assert "default" in _help_of("bench tau2", option) or option == "--config"


def _readme_rows() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.startswith("| `policyguard ")]


def _row_for(path: str, rows: list[str]) -> str:
    for row in rows:
        if f"policyguard {path} " in row or f"policyguard {path}`" in row:
            return row
    group, _, leaf = path.rpartition(" ")
    for row in rows:  # 'checklist schema | validate C ... | show C ...' and 'bench inspect DIR' in the refund row
        if f"policyguard {group} " in row and (f"\\| {leaf} " in row or f"`{path} " in row):
            return row
    raise AssertionError(f"docs/reference/cli.md's command table has no row for 'policyguard {path}'")


def test_readme_command_table_lists_every_flag_of_every_command() -> None:
    rows = _readme_rows()
    missing = []
    for path, parser in _commands(build_parser()):
        if not path or parser._subparsers is not None:
            continue  # the top level and groups ('checklist', 'bench')
        row = _row_for(path, rows)
        for action in parser._actions:
            flags = [o for o in action.option_strings if o not in ("-h", "--help")]
            if flags and not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", row) for o in flags):
                missing.append(f"{path}: {flags[-1]}")
    assert missing == []
