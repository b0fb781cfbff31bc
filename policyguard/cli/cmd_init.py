"""``policyguard init CHECKLIST.yaml``: write a starter scenarios file next to a checklist.

The first hour is: ``checklist init`` (a skeleton from the policy and the tools),
write the requirements, ``init`` (scenarios to test them), ``policyguard test``,
then shadow mode on live traffic, then enforce.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from policyguard.errors import ConfigError

_START = "start with a checklist: policyguard checklist init --policy POLICY.md --tools TOOLS.json -o checklist.yaml"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "init",
        help="write a starter scenarios.yaml next to a checklist (no checklist yet? see 'checklist init')",
        description=(
            "Writes scenarios.yaml beside CHECKLIST.yaml: one scenario per write tool, for 'policyguard test'. "
            "No checklist yet? 'policyguard checklist init --policy POLICY.md --tools TOOLS.json -o "
            "checklist.yaml' writes one. Exit 0 written, 2 the checklist cannot be read or the file exists "
            "(without --force)."
        ),
    )
    parser.add_argument("checklist", nargs="?", type=Path, metavar="CHECKLIST.yaml", help="the checklist to test")
    parser.add_argument("-o", "--output", type=Path, help="where to write (default: scenarios.yaml beside it)")
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    parser.add_argument(
        "--host",
        choices=("claude-code",),
        default=None,
        help="instead of scenarios, wire the guard into an agent host: claude-code writes the hooks block of "
        ".claude/settings.json (needs --policy)",
    )
    parser.add_argument("--policy", type=Path, help="the policy file the host's hook reads (with --host)")
    parser.add_argument("--project", type=Path, default=Path("."), help="the project folder (with --host; default .)")
    parser.add_argument(
        "--server",
        metavar="URL",
        help="with --host claude-code: the hook is the thin client of a running `policyguard serve` at URL (started "
        "with the same --policy and --checklist): each call forwards the event instead of loading the guard",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from policyguard.authoring.scenarios import starter_scenarios
    from policyguard.checklist.schema import load_checklist

    if args.checklist is None:
        raise ConfigError(f"no checklist given: {_START}")
    if not args.checklist.exists():
        raise ConfigError(f"{args.checklist}: no such checklist; {_START}")
    checklist = load_checklist(args.checklist)
    if args.host == "claude-code":
        from .claude_settings import write_settings

        return write_settings(checklist, args)
    output = args.output or args.checklist.parent / "scenarios.yaml"
    if output.exists() and not args.force:
        raise ConfigError(f"{output}: already exists (pass --force to overwrite)")
    try:
        output.write_text(starter_scenarios(checklist, args.checklist.name), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{output}: cannot write: {exc.strerror or exc}") from None
    print(f"{output}: starter scenarios written; run: policyguard test {output} --policy POLICY.md "
          f"--checklist {args.checklist}", file=sys.stderr)  # fmt: skip
    return 0
