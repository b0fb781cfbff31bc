"""A cold ``policyguard verify``, ``hook`` or ``test`` loads only what deciding a call needs.

The ``cel`` package's ``__init__`` imports its command-line REPL (typer, rich,
prompt_toolkit, pygments); the gate loads only the compiled engine
(:func:`policyguard.gate.cel.engine`). Building the CLI parser registers
``checklist generate`` without importing the generation pipeline, and a run
imports only the module of the command it names. A gate-only command loads no
model SDK and no server. Each check runs in a fresh interpreter, since this
process has imported everything already.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples import refund_desk as desk
from policyguard.cli import BENCH, COMMANDS, _modules
from policyguard.trajectory.canonical import policy_version
from tests.integrations.claude_code.shapes import Transcript, post, pre, use

ROOT = Path(__file__).resolve().parents[1]
REPL = ("typer", "rich", "prompt_toolkit", "pygments", "click")
MODEL_LIBRARIES = ("litellm", "openai", "anthropic")
SERVERS = ("starlette", "uvicorn")

POLICY = "Refund at most what was captured.\n"
CHECKLIST = """\
policy: {{name: refunds, version: "{version}"}}
facts:
  order: {{tool: get_order, match: {{order_id: args.order_id}}}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: within-captured
        text: The refund must not exceed the amount captured.
        kind: data
        source: Refund at most what was captured.
        prerequisites: [get_order]
        check: args.amount <= facts.order.captured
"""


def _modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """Every module a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint('LOADED:' + ','.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED:"))
    return {m for m in line.removeprefix("LOADED:").split(",") if m}


def _loaded_after(code: str, watched: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    """The ``watched`` top-level packages a fresh interpreter has loaded after running ``code``."""
    return sorted({m.split(".")[0] for m in _modules_after(code, env)} & set(watched))


def test_compiling_and_evaluating_a_check_loads_no_repl_library() -> None:
    code = "from policyguard.gate.cel import compile_check\nassert compile_check('args.a < 2').holds({'args': {'a': 1}})"
    assert _loaded_after(code, REPL + MODEL_LIBRARIES) == []


def test_a_gate_only_verify_loads_neither_the_repl_nor_a_model_library(tmp_path: Path) -> None:
    (tmp_path / "policy.md").write_text(POLICY)
    (tmp_path / "checklist.yaml").write_text(CHECKLIST.format(version=policy_version(POLICY)))
    call = {
        "id": "w1",
        "type": "function",
        "function": {"name": "issue_refund", "arguments": '{"order_id": "O1", "amount": 5}'},
    }
    dialogue = [
        {"role": "user", "content": "Refund 5 on O1."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "r1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O1"}'}}]},
        {"role": "tool", "tool_call_id": "r1", "content": json.dumps({"order_id": "O1", "captured": 80})},
    ]  # fmt: skip
    (tmp_path / "call.json").write_text(json.dumps(call))
    (tmp_path / "trajectory.json").write_text(json.dumps(dialogue))
    argv = ["verify", "--policy", str(tmp_path / "policy.md"), "--checklist", str(tmp_path / "checklist.yaml"),
            "--trajectory", str(tmp_path / "trajectory.json"), "--call", str(tmp_path / "call.json")]  # fmt: skip
    code = f"from policyguard.cli import main\ncode = main({argv!r})\nassert code == 0, code"
    assert _loaded_after(code, REPL + MODEL_LIBRARIES + SERVERS) == []
    explicit = f"from policyguard.cli import main\ncode = main({[*argv, '--model', 'none']!r})\nassert code == 0, code"
    loaded = _modules_after(explicit)
    assert {m.split(".")[0] for m in loaded} & set(REPL + MODEL_LIBRARIES + SERVERS) == set()
    assert sorted(m for m in loaded if m.startswith("policyguard.cli.")) == ["policyguard.cli.cmd_verify"]
    assert "policyguard.verifier.models.base" not in loaded  # no verifier: no request or response models


def test_the_claude_code_hook_on_a_read_and_a_write_loads_no_model_library_and_no_server(tmp_path: Path) -> None:
    """After two reads recorded as Claude Code sends them, one fresh interpreter answers a read and a write."""
    argv = ["hook", "claude-code", "--policy", str(desk.POLICY), "--checklist", str(desk.CHECKLIST)]
    env = {"CLAUDE_PROJECT_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}

    def answer(event: dict[str, object]) -> None:
        done = subprocess.run([sys.executable, "-m", "policyguard", *argv], input=json.dumps(event), text=True,
                              capture_output=True, timeout=120, env={**os.environ, **env})  # fmt: skip
        assert (done.returncode, done.stdout.strip()) == (0, "{}"), done.stderr

    t = Transcript(tmp_path / "session.jsonl")
    t.user("I'm ada@example.com. Please refund order O1, 80 dollars. Yes, go ahead with 80.")
    for call_id, name, result, arguments in [
        ("toolu_01", "find_customer", desk.CUSTOMERS["ada@example.com"], {"email": "ada@example.com"}),
        ("toolu_02", "get_order", desk.ORDERS["O1"], {"order_id": "O1"}),
    ]:
        t.assistant(use(call_id, name, **arguments))
        answer(pre(t, call_id, name, **arguments))
        t.result(call_id, result)
        answer(post(t, call_id, name, json.dumps(result), **arguments))
    write = pre(t, "toolu_03", "issue_refund", order_id="O1", amount=500)
    read = pre(t, "toolu_04", "find_customer", email="ada@example.com")
    code = (
        "import io, json, sys\nfrom policyguard.cli import main\nanswers = []\n"
        f"for event in {[write, read]!r}:\n"
        "    sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps(event).encode()))\n"
        f"    assert main({argv!r}) == 0\n"
        "import gc\nassert gc.isenabled()  # paused while the guard loads, on again after\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr
    denied, passed = (json.loads(line) for line in done.stdout.splitlines())
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "within-captured" in denied["hookSpecificOutput"]["permissionDecisionReason"]
    assert passed == {}
    loaded = _modules_after(code, env)
    assert {m.split(".")[0] for m in loaded} & set(REPL + MODEL_LIBRARIES + SERVERS) == set()
    assert sorted(m for m in loaded if m.startswith("policyguard.cli.")) == ["policyguard.cli.cmd_hook"]


def test_policyguard_test_loads_no_model_library_and_no_server() -> None:
    scenarios = ROOT / "tests" / "scenarios" / "refund" / "scenarios.yaml"
    argv = ["test", str(scenarios), "--policy", str(desk.POLICY), "--checklist", str(desk.CHECKLIST)]
    code = f"from policyguard.cli import main\ncode = main({argv!r})\nassert code == 0, code"
    assert _loaded_after(code, REPL + MODEL_LIBRARIES + SERVERS, {"PYTHONPATH": str(ROOT)}) == []


@pytest.mark.parametrize("word", sorted(COMMANDS))
def test_each_command_word_is_registered_by_the_module_the_table_names(word: str) -> None:
    """``main`` imports only ``COMMANDS[word]`` for a run: that module must add exactly that command."""
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"policyguard.cli.{COMMANDS[word]}").register(sub)
    assert list(sub.choices) == [word]


def test_the_table_names_every_command_module() -> None:
    assert sorted(COMMANDS.values()) == _modules("cmd_")
    assert BENCH not in COMMANDS


def test_building_the_cli_parser_does_not_import_checklist_generation() -> None:
    code = (
        "from policyguard.cli import build_parser\nbuild_parser()\nimport sys\n"
        "print(','.join(m for m in ('policyguard.authoring.checkgen.ask', 'policyguard.authoring.checkgen.pipeline') if m in sys.modules),"
        " file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == ""


def test_the_package_imported_after_the_engine_shares_the_one_engine() -> None:
    """``import cel`` after the gate loaded the engine reuses it (the extension is initialised once)."""
    code = (
        "from policyguard.gate.cel import engine, compile_check\n"
        "compile_check('1 < 2')\n"
        "import cel\n"
        "assert cel.compile is engine().compile\n"
        "assert cel.evaluate('1 + 2') == 3\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_engine_is_the_package_itself_when_the_package_was_imported_first() -> None:
    code = "import cel\nfrom policyguard.gate.cel import engine\nassert engine().compile is cel.compile\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_threads_that_check_at_once_share_one_engine() -> None:
    """The first checks of several threads at once load the engine once (an extension cannot load twice)."""
    code = (
        "import threading\n"
        "from policyguard.gate.cel import compile_check\n"
        "results = []\n"
        "def work():\n"
        "    results.append(compile_check('args.a < 2').holds({'args': {'a': 1}}))\n"
        "threads = [threading.Thread(target=work) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join(timeout=60) for t in threads]\n"
        "assert results == [True] * 8, results\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
