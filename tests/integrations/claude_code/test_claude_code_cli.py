"""``policyguard hook claude-code`` as Claude Code runs it, and ``policyguard init --host claude-code``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from examples import refund_desk as desk
from policyguard.cli import main

from .shapes import Transcript, post, pre, use

ROOT = Path(__file__).resolve().parents[3]


def hook(event: object, project: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    data = event if isinstance(event, str) else json.dumps(event)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLAUDE_PROJECT_DIR": str(project)}
    command = [sys.executable, "-m", "policyguard", "hook", "claude-code", "--policy", str(desk.POLICY),
               "--checklist", str(desk.CHECKLIST), *extra]  # fmt: skip
    return subprocess.run(command, input=data, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_the_command_denies_over_stdin_and_keeps_the_record_in_the_project(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "session.jsonl")
    t.user("I'm ada@example.com, refund O1 please.")
    t.assistant(use("toolu_01", "get_order", order_id="O1"))
    assert hook(pre(t, "toolu_01", "get_order", order_id="O1"), tmp_path).stdout.strip() == "{}"
    order = {"order_id": "O1", "customer_id": "C1", "captured": 80.0}
    t.result("toolu_01", order)
    done = hook(post(t, "toolu_01", "get_order", order, order_id="O1"), tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "{}")
    t.assistant(use("toolu_02", "issue_refund", order_id="O1", amount=500))
    denied = hook(pre(t, "toolu_02", "issue_refund", order_id="O1", amount=500), tmp_path)
    assert denied.returncode == 0
    assert json.loads(denied.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert (tmp_path / ".policyguard" / "sessions.db").is_file()


@pytest.mark.parametrize(("preset", "seen"), [(None, "__all__"), ("", ""), ("logfire", "logfire")])
def test_the_hook_skips_pydantic_plugin_discovery_unless_told_otherwise(
    tmp_path: Path, preset: str | None, seen: str
) -> None:
    """One process per call: scanning every installed distribution for pydantic plugins costs it ~11 ms. A value
    the user set (the empty string keeps every plugin) is left as it is."""
    t = Transcript(tmp_path / "session.jsonl")
    t.assistant(use("toolu_01", "get_order", order_id="O1"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLAUDE_PROJECT_DIR": str(tmp_path)}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    if preset is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = preset
    script = (
        "import os, sys\nfrom policyguard.cli import main\ncode = main(sys.argv[1:])\n"
        "print(repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')), file=sys.stderr)\nsys.exit(code)"
    )
    command = [sys.executable, "-c", script, "hook", "claude-code", "--policy", str(desk.POLICY),
               "--checklist", str(desk.CHECKLIST)]  # fmt: skip
    event = json.dumps(pre(t, "toolu_01", "get_order", order_id="O1"))
    done = subprocess.run(command, input=event, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "{}")
    assert done.stderr.strip().splitlines()[-1] == repr(seen)


@pytest.mark.parametrize("event", ["{broken", json.dumps({"session_id": "s", "hook_event_name": "PreToolUse"})])
def test_bad_input_exits_2_with_one_line_on_stderr_never_1(tmp_path: Path, event: str) -> None:
    done = hook(event, tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("policyguard: blocked:")


def test_a_store_that_cannot_open_exits_2(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "session.jsonl")
    done = hook(pre(t, "toolu_01", "get_order", order_id="O1"), tmp_path, "--store", "redis://nowhere")
    assert done.returncode == 2
    assert "unknown scheme" in done.stderr


def test_init_writes_the_hooks_block_whose_matcher_lists_the_checklist_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("policy.md", "checklist.yaml"):
        shutil.copy(desk.HERE / name, tmp_path / name)
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    other = {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [other]}}))
    args = ["init", str(tmp_path / "checklist.yaml"), "--host", "claude-code", "--policy",
            str(tmp_path / "policy.md"), "--project", str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    assert main(args) == 0  # again: the policyguard entry is replaced, not doubled
    written = json.loads(settings.read_text())
    assert written["model"] == "opus"
    pre_hooks = written["hooks"]["PreToolUse"]
    assert pre_hooks[0] == other and len(pre_hooks) == 2
    ours = pre_hooks[1]
    assert written["hooks"]["PostToolUse"] == [ours]
    command = ours["hooks"][0]["command"]
    assert command.startswith('policyguard hook claude-code --policy "$CLAUDE_PROJECT_DIR/policy.md"')
    assert command.endswith("|| exit 2")
    pattern = re.compile(ours["matcher"])
    for name in ("issue_refund", "get_order", "find_customer", "mcp__desk__issue_refund"):
        assert pattern.search(name), name
    for name in ("Bash", "Read", "issue_refund_all", "mcp__desk__other"):
        assert not pattern.search(name), name


def test_init_with_a_server_writes_the_thin_client_command(tmp_path: Path) -> None:
    for name in ("policy.md", "checklist.yaml"):
        shutil.copy(desk.HERE / name, tmp_path / name)
    args = ["init", str(tmp_path / "checklist.yaml"), "--host", "claude-code", "--policy",
            str(tmp_path / "policy.md"), "--project", str(tmp_path), "--server", "http://127.0.0.1:8700"]  # fmt: skip
    assert main(args) == 0
    hooks = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]
    command = hooks["PreToolUse"][0]["hooks"][0]["command"]
    assert command == "policyguard hook claude-code --server http://127.0.0.1:8700 || exit 2"
    assert re.compile(hooks["PreToolUse"][0]["matcher"]).search("issue_refund")


@pytest.mark.parametrize("server", ["ftp://example.org", "http://x; rm -rf ~", "localhost:8700"])
def test_init_refuses_a_server_that_is_not_a_plain_http_url(tmp_path: Path, server: str) -> None:
    for name in ("policy.md", "checklist.yaml"):
        shutil.copy(desk.HERE / name, tmp_path / name)
    args = ["init", str(tmp_path / "checklist.yaml"), "--host", "claude-code", "--policy",
            str(tmp_path / "policy.md"), "--project", str(tmp_path), "--server", server]  # fmt: skip
    assert main(args) == 2
    assert not (tmp_path / ".claude" / "settings.json").exists()
