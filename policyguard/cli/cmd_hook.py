"""``policyguard hook claude-code``: answer one Claude Code hook event (JSON on stdin, JSON on stdout).

Exit codes are Claude Code's, not the rest of the CLI's: 0 with the answer on
stdout (a deny is an answer), 2 with one line on stderr for anything that went
wrong (Claude Code blocks the call and shows the line). Never 1: Claude Code
treats 1 as a non-blocking error and runs the call.

The in-process hook is a one-shot process that loads the guard (some fifty
thousand long-lived objects the collector tracks: modules, classes, validators)
to decide one call. The cyclic garbage collector is paused while it loads, since
nearly all it allocates then is kept (on the refund desk, 245 -> 203 ms p50 over
15 runs), and while it decides: the decision reads the whole transcript and
session record, whose objects live until the process exits moments later (a
session of 1,000 earlier calls: 278 -> 265 ms median, paired). What it made is
then frozen (:func:`gc.freeze`), so the interpreter's last collection at exit
does not walk it. It also skips pydantic's plugin discovery, a scan of every installed
distribution's entry points on the first model it builds (186 -> 175 ms median, 20 paired
runs of a write on the refund desk): ``PYDANTIC_DISABLE_PLUGINS`` is set to ``__all__``
for this process unless it is set already (to anything, the empty string included, which
keeps every plugin).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

MAX_EVENT_BYTES = 16 * 1024 * 1024
SESSIONS_DB = Path(".policyguard") / "sessions.db"
PYDANTIC_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"  # pydantic reads it when it builds its first model
# The defaults of the flags only an in-process hook reads: with --server, any other value is refused.
IN_PROCESS_DEFAULTS: dict[str, Any] = {
    "store": None, "model": "none", "allow": False, "mcp_name": [], "unknown_tools": "block", "result_wait": 5.0,
}  # fmt: skip


class _TimedOut(Exception):
    pass


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "hook",
        help="answer an agent host's hook event (Claude Code's PreToolUse / PostToolUse)",
        description="Reads one hook event as JSON on stdin and writes the hook's answer on stdout.",
    )
    hosts = parser.add_subparsers(dest="host", metavar="HOST", required=True)
    claude = hosts.add_parser(
        "claude-code",
        help="a Claude Code command hook (PreToolUse, PostToolUse, PostToolUseFailure)",
        description=(
            "PreToolUse: a block answers permissionDecision 'deny' with the remediation, an escalation 'ask', a pass "
            "no opinion (or 'allow' with --allow). PostToolUse records tool_response in the session record. Exit 0 "
            "with the answer, 2 with one line on stderr on any error (Claude Code then blocks the call); never 1."
        ),
    )
    claude.add_argument("--policy", type=Path, help="the policy text file (required unless --server)")
    claude.add_argument("--checklist", type=Path, help="the checklist YAML (required unless --server)")
    claude.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="forward the event to a running `policyguard serve` (its POST /v1/hooks/claude-code, bearer token from "
        "$POLICYGUARD_SERVE_TOKEN) and print its answer; the server's policy and checklist decide. A server that "
        "is down or answers anything but a JSON object is exit 2 (blocked)",
    )
    claude.add_argument(
        "--store",
        default=IN_PROCESS_DEFAULTS["store"],
        help="where session records live: sqlite:///path.db or postgresql://...; default "
        "sqlite:///<project>/.policyguard/sessions.db (project: $CLAUDE_PROJECT_DIR, else the event's cwd)",
    )
    claude.add_argument(
        "--model",
        default=IN_PROCESS_DEFAULTS["model"],
        help="verifier model spec, as for serve (default none: the gate)",
    )
    claude.add_argument("--allow", action="store_true", help="answer 'allow' on a pass instead of no opinion")
    claude.add_argument(
        "--mcp-name",
        action="append",
        default=IN_PROCESS_DEFAULTS["mcp_name"],
        metavar="SERVER=RULE",
        help="how mcp__SERVER__tool maps to a checklist name: strip (default), keep, or prefix:TEXT",
    )
    claude.add_argument(
        "--unknown-tools",
        choices=("block", "check"),
        default=IN_PROCESS_DEFAULTS["unknown_tools"],
        help="a tool no checklist entry covers: block (default) or check it against the general rules",
    )
    claude.add_argument(
        "--timeout",
        type=float,
        default=45.0,
        help="seconds before the hook gives up and blocks (default 45; keep it below the hook's timeout in "
        "settings.json, after which Claude Code would run the call)",
    )
    claude.add_argument(
        "--result-wait",
        type=float,
        default=IN_PROCESS_DEFAULTS["result_wait"],
        help="seconds a write waits for the result of the session's earlier allowed call (default 5); past it "
        "that call counts as run with an unknown result",
    )
    claude.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Answer the event on stdin; every failure is exit 2 with one line on stderr."""
    previous = _arm(args.timeout)
    try:
        if args.server is not None:  # the thin client: the standard library only, no guard in this process
            from .hookclient import forward

            if args.policy is not None or args.checklist is not None:
                raise _Usage("--server decides with the server's policy and checklist: drop --policy and --checklist")
            local = _local_settings(args)
            if local:
                raise _Usage(f"with --server the server's own settings decide: drop {', '.join(local)}")
            data = sys.stdin.buffer.read(MAX_EVENT_BYTES + 1)
            if len(data) > MAX_EVENT_BYTES:
                raise _Usage(f"the hook event is larger than {MAX_EVENT_BYTES} bytes")
            answer = forward(args.server, data, args.timeout)
        elif args.policy is None or args.checklist is None:
            raise _Usage("give --policy and --checklist, or --server URL")
        else:
            answer = _answer(args, sys.stdin.buffer.read(MAX_EVENT_BYTES + 1))
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        return 0
    except BaseException as exc:  # noqa: BLE001 -- fail closed: nothing may end in exit 1 ("go ahead")
        if isinstance(exc, SystemExit) and exc.code in (0, 2):
            raise
        reason = f"no decision within {args.timeout:g} s" if isinstance(exc, _TimedOut) else _reason(exc)
        print(f"policyguard: blocked: {reason}", file=sys.stderr)
        return 2
    finally:
        _disarm(previous)


def _answer(args: argparse.Namespace, data: bytes) -> dict[str, Any]:
    os.environ.setdefault(PYDANTIC_PLUGINS, "__all__")  # read when the first model is built, below
    with _collector_paused():
        from policyguard.integrations.claude_code import ClaudeCodeHook, HookEvent, HookInputError, McpNames

        if len(data) > MAX_EVENT_BYTES:
            raise HookInputError(f"the hook event is larger than {MAX_EVENT_BYTES} bytes")
        event = HookEvent.read(data)
        guard = _guard(args, event.cwd)
        return ClaudeCodeHook(guard, allow=args.allow, names=McpNames.parse(args.mcp_name)).answer(event)


def _guard(args: argparse.Namespace, cwd: str | None) -> Any:
    from policyguard.enforcement.storeurl import open_store
    from policyguard.guard.build import from_files
    from policyguard.guard.core import Guard

    store = open_store(args.store or default_store(cwd))
    return from_files(
        Guard, policy=args.policy, checklist=args.checklist, model=args.model, mode="enforce",
        verifier_mode="checklist", use_gate=True, trace_path=None, unknown_tools=args.unknown_tools,
        sessions=store, session_wait_s=max(1.0, args.timeout - 5), session_result_wait_s=args.result_wait,
    )  # fmt: skip


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic collector paused while the guard loads and decides; what they made frozen out of its sight after.

    Left alone when the collector is already off (the caller manages it)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def default_store(cwd: str | None) -> str:
    """``sqlite:///<project>/.policyguard/sessions.db``, creating the folder."""
    project = Path(os.environ.get("CLAUDE_PROJECT_DIR") or cwd or os.getcwd())
    path = (project / SESSIONS_DB).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _local_settings(args: argparse.Namespace) -> list[str]:
    """The flags given that only an in-process hook reads (the server has its own)."""
    given = [name for name, default in IN_PROCESS_DEFAULTS.items() if getattr(args, name) != default]
    return ["--" + name.replace("_", "-") for name in given]


class _Usage(Exception):
    """A wrong combination of flags: blocked like any other failure, naming the fix."""


def _reason(exc: BaseException) -> str:
    from policyguard.errors import PolicyGuardError

    from .hookclient import ForwardError  # the standard library only

    text = " ".join(str(exc).split())[:500]
    if isinstance(exc, (ForwardError, _Usage)) and text:
        return text

    return text if isinstance(exc, PolicyGuardError) and text else f"{type(exc).__name__}: {text}"


def _arm(seconds: float) -> Any:
    if not hasattr(signal, "SIGALRM") or seconds <= 0:
        return None

    def expire(signum: int, frame: FrameType | None) -> None:
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return previous


def _disarm(previous: Any) -> None:
    if previous is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
