"""The server flags of every HTTP surface (``serve``, ``review``, ``mcp-proxy --listen``).

Light on purpose: the CLI registers them for every command, so nothing here imports uvicorn.
The defaults are :class:`policyguard.serve.server.ServerSettings`' (a test pins them together).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server flags, the same on every surface."""
    group = parser.add_argument_group("server limits (the same on serve, review and mcp-proxy --listen)")
    group.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="seconds a connection may take to send a request's headers before it is closed (default 10)",
    )
    group.add_argument(
        "--body-timeout",
        type=float,
        default=None,
        help="seconds a request's body may take once its headers are in; a slower one is closed (default 30)",
    )
    group.add_argument(
        "--keep-alive",
        type=float,
        default=None,
        help="seconds an idle connection is kept between requests (default 5)",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections per process (default 256, less if the open-file limit allows no more); at the "
        "bound the connection waiting longest for its headers is closed, or the new one gets a 503 if all are busy",
    )
    group.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body; a larger one is answered 413 (default 4 MiB)",
    )
