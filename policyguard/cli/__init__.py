"""The ``policyguard`` command line.

Commands are discovered from modules in this package: ``cmd_*`` modules add
top-level commands, ``bench_*`` modules add ``policyguard bench`` sub-commands.
A run imports only the module of the command it names (:data:`COMMANDS`), so
``policyguard hook`` or ``verify`` does not pay for the server, the benchmarks
or checklist generation; help and an unknown command build the whole parser.
Exit codes: 0 PASS/ok, 1 BLOCK or violations found, 2 bad input (one
``policyguard: error:`` line on stderr naming the file or setting), 3
inconclusive, 141 the reader of stdout went away (``verify | head``), as for a
process ended by SIGPIPE.

May use: everything; it is the top layer. Nothing imports it but ``__main__``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from policyguard import __version__
from policyguard.errors import PolicyGuardError

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head`
BENCH = "bench"

COMMANDS: dict[str, str] = {
    "approvals": "cmd_approvals",
    "audit": "cmd_audit",
    "checklist": "cmd_checklist",
    "demo": "cmd_demo",
    "hook": "cmd_hook",
    "init": "cmd_init",
    "mcp-proxy": "cmd_mcp_proxy",
    "review": "cmd_review",
    "serve": "cmd_serve",
    "test": "cmd_test",
    "verify": "cmd_verify",
}
"""Each top-level command and the module that registers it (a test checks this against the modules)."""


def _modules(prefix: str) -> list[str]:
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith(prefix))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or with ``only`` (a word of :data:`COMMANDS`, or ``bench``) that command alone.

    A host runs ``policyguard hook`` before every tool call, and ``verify`` decides one call: building
    only their command spares them importing the others.
    """
    parser = argparse.ArgumentParser(
        prog="policyguard", description="Enforce company policy on LLM agents at the tool boundary."
    )
    parser.add_argument("--version", action="version", version=f"policyguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if only is None:
        modules = _modules("cmd_")
    elif only in COMMANDS:
        modules = [COMMANDS[only]]
    elif only == BENCH:
        modules = []
    else:
        raise ValueError(f"no command {only!r}")
    for name in modules:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    bench_names = _modules("bench_") if only in (None, BENCH) else []
    if bench_names:
        bench = sub.add_parser("bench", help="benchmarks and experiments")
        bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
        for name in bench_names:
            importlib.import_module(f"{__name__}.{name}").register(bench_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    first = words[0] if words else None
    parser = build_parser(first if first in COMMANDS or first == BENCH else None)
    args = parser.parse_args(words)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
    except PolicyGuardError as exc:
        print(f"policyguard: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout with no file descriptor (tests, embedding)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
