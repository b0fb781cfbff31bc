"""The ``policyguard`` command line.

Commands are discovered from modules in this package: ``cmd_*`` modules add
top-level commands, ``bench_*`` modules add ``policyguard bench`` sub-commands.
Exit codes: 0 PASS/ok, 1 BLOCK or violations found, 2 bad input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from ..errors import PolicyGuardError


def _modules(prefix: str) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith(prefix))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="policyguard", description="Enforce company policy on LLM agents at the tool boundary."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _modules("cmd_"):
        importlib.import_module(f"{__name__}.{name}").register(sub)
    bench_names = _modules("bench_")
    if bench_names:
        bench = sub.add_parser("bench", help="benchmarks and experiments")
        bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
        for name in bench_names:
            importlib.import_module(f"{__name__}.{name}").register(bench_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PolicyGuardError as exc:
        print(f"policyguard: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
