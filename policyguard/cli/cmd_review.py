"""``policyguard review --store URL [--trace FILE...]``: the review console (approval queue, decision browser)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from policyguard.distribution import install_hint
from policyguard.errors import ConfigError
from policyguard.loopback import is_loopback

DEFAULT_PORT = 8710


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "review",
        help="serve the review console: approve or deny escalated calls, browse decisions",
        description=(
            "A small web app for the people who own the policy: the queue of calls waiting for a "
            "supervisor (approve or deny each exact call, with a reason), and a browser over trace files "
            "(filter by outcome, tool, failed requirement; INV-1 findings highlighted). Login by the token "
            "in POLICYGUARD_REVIEW_TOKEN (required, at least 16 characters). Needs the [review] extra."
        ),
    )
    parser.add_argument(
        "--store", required=True, metavar="URL", help="the store holding the approval queue, e.g. sqlite:///guard.db"
    )
    parser.add_argument(
        "--trace", action="append", default=[], metavar="FILE", help="a JSONL trace to browse (repeatable)"
    )
    parser.add_argument("--events", metavar="FILE", help="append the reviewers' approve/deny events to this trace file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (put TLS in front: the login token and cookie travel in clear otherwise); "
        "implies --secure-cookie",
    )
    parser.add_argument(
        "--secure-cookie",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mark the session cookie Secure, so a browser sends it over HTTPS only (default: on with "
        "--allow-remote, off otherwise; --no-secure-cookie for a remote console without TLS)",
    )
    from policyguard.cli.server_flags import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from policyguard.review.auth import TOKEN_ENV, token_problem

    token = os.environ.get(TOKEN_ENV)
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(problem)
    assert token is not None
    if not is_loopback(args.host) and not args.allow_remote:
        raise ConfigError(f"--host {args.host}: not a loopback address; add --allow-remote (and put TLS in front)")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a port number")
    for path in args.trace:
        if not os.path.isfile(path):
            raise ConfigError(
                f"--trace {path}: no such file; a guard writes it (verify/serve --trace FILE, "
                "Guard.from_files(trace_path=...)): run one first, or start the console without --trace"
            )
    try:
        import uvicorn

        from policyguard.review.app import create_app
        from policyguard.serve.server import from_args, with_health
    except ImportError as exc:
        raise ConfigError(f"the review console needs the [review] extra: {install_hint('review')} ({exc})") from exc
    from policyguard.approvals.url import open_approvals

    server = from_args(args)  # before the queue: a bad limit is refused first
    queue = open_approvals(args.store, create=False)  # a mistyped path is an error, not a new empty queue
    secure = args.allow_remote if args.secure_cookie is None else args.secure_cookie
    app = create_app(
        queue, token=token, trace_files=args.trace, decide=_decider(queue, args.events), secure_cookie=secure
    )
    print(f"policyguard review: http://{args.host}:{args.port}/ (queue in {args.store})", file=sys.stderr, flush=True)
    uvicorn.run(with_health(app), host=args.host, port=args.port, log_level="warning", **server.uvicorn())
    return 0


def _decider(queue: Any, events: str | None) -> Any:
    """Record a decision through the approval flow: the queue's atomic change, then its ``approve``/``deny`` event."""
    from policyguard.approvals.flow import decide
    from policyguard.audit.trace import Trace

    trace = Trace(events) if events else None

    def record(request_id: str, action: Any, reviewer: str, reason: str | None) -> Any:
        return decide(queue, request_id, action, reviewer, reason, trace=trace)

    return record
