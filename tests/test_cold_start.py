"""A cold ``policyguard verify`` loads only what deciding a call needs.

The ``cel`` package's ``__init__`` imports its command-line REPL (typer, rich,
prompt_toolkit, pygments); the gate loads only the compiled engine
(:func:`policyguard.gate.cel.engine`). Building the CLI parser registers
``checklist generate`` without importing the generation pipeline. Each check
runs in a fresh interpreter, since this process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from policyguard.trajectory.canonical import policy_version

REPL = ("typer", "rich", "prompt_toolkit", "pygments", "click")
MODEL_LIBRARIES = ("litellm", "openai", "anthropic")

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


def _loaded_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """The ``watched`` top-level packages a fresh interpreter has loaded after running ``code``."""
    report = f"print('LOADED:' + ','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(watched)!r})))"
    probe = f"{code}\nimport sys\n{report}"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED:"))
    return [m for m in line.removeprefix("LOADED:").split(",") if m]


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
    assert _loaded_after(code, REPL + MODEL_LIBRARIES) == []


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
