"""``policyguard init --host claude-code``: the hooks block of ``.claude/settings.json``.

PreToolUse and PostToolUse each get one matcher entry whose regex lists the
checklist's tools (plain and as ``mcp__<server>__<tool>``), so a tool the checklist
does not name never spawns the hook process. The command ends in ``|| exit 2``: if
the hook cannot even start (``policyguard`` not on PATH, a broken install), Claude
Code sees exit 2, a block, not 1 or 127, which it would take as "go ahead".
Other hooks in the file are kept; an earlier policyguard entry is replaced.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from policyguard.checklist.schema import Checklist, is_glob
from policyguard.errors import ConfigError

HOOK_TIMEOUT_S = 60  # Claude Code runs the call if a hook outlives this; the command gives up at 45 s and blocks
MARKER = "policyguard hook claude-code"


def matcher(checklist: Checklist) -> str:
    """A regex matching each checklist tool, bare or behind any MCP server's prefix."""
    names = sorted(_pattern(key) for key in checklist.tools)
    return f"^(mcp__[A-Za-z0-9_-]+__)?({'|'.join(names)})$"


def _pattern(key: str) -> str:
    if not is_glob(key):
        return re.escape(key)
    return "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in key)


def hooks_block(checklist: Checklist, policy: str, checklist_path: str, server: str | None = None) -> dict[str, Any]:
    """The ``hooks`` entries for PreToolUse and PostToolUse (paths relative to the project).

    With ``server`` the command is the thin client of that ``policyguard serve``, which must run with
    the same policy and checklist; the matcher still comes from the checklist.
    """
    if server is not None:
        command = f"{MARKER} --server {shlex.quote(server)} || exit 2"
    else:
        command = (
            f'{MARKER} --policy "$CLAUDE_PROJECT_DIR/{policy}" --checklist "$CLAUDE_PROJECT_DIR/{checklist_path}"'
            " || exit 2"
        )
    entry = {"matcher": matcher(checklist), "hooks": [{"type": "command", "command": command,
                                                        "timeout": HOOK_TIMEOUT_S}]}  # fmt: skip
    return {"PreToolUse": [entry], "PostToolUse": [entry]}


def write_settings(checklist: Checklist, args: argparse.Namespace) -> int:
    server = getattr(args, "server", None)
    if server is not None and not re.fullmatch(r"https?://[^\s'\"]+", server):
        raise ConfigError(f"--server must be an http:// or https:// URL, got {server!r}")
    if args.policy is None:
        raise ConfigError("--host claude-code needs --policy POLICY.md (the hook command reads it)")
    project = args.project.resolve()
    policy, checklist_path = _relative(args.policy, project), _relative(args.checklist, project)
    path = project / ".claude" / "settings.json"
    settings: dict[str, Any] = {}
    if path.exists():
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read the existing settings: {exc}") from None
        if not isinstance(settings, dict) or not isinstance(settings.get("hooks", {}), dict):
            raise ConfigError(f"{path}: the settings or their 'hooks' are not a JSON object")
    hooks = settings.setdefault("hooks", {})
    for event, entries in hooks_block(checklist, policy, checklist_path, server).items():
        kept = [e for e in hooks.get(event, []) if MARKER not in json.dumps(e)]
        hooks[event] = [*kept, *entries]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from None
    print(f"{path}: PreToolUse and PostToolUse hooks written for {len(checklist.tools)} tool(s)", file=sys.stderr)
    return 0


def _relative(path: Path, project: Path) -> str:
    resolved = path.resolve()
    if not resolved.is_relative_to(project):
        raise ConfigError(f"{path}: not inside the project {project}; the hook finds files through $CLAUDE_PROJECT_DIR")
    return resolved.relative_to(project).as_posix()
