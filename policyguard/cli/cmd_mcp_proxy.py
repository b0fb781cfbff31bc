"""``policyguard mcp-proxy``: an MCP server in front of another, guarding its tool calls.

Loads the MCP SDK only when run (extra ``[mcp]``): ``policyguard --help`` needs none of it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from policyguard.distribution import install_hint
from policyguard.errors import ConfigError
from policyguard.loopback import is_loopback

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.guard.core import Guard


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "mcp-proxy",
        help="serve an upstream MCP server's tools through the guard (stdio or streamable HTTP)",
        description="An MCP server that fronts one upstream MCP server: tools/list, prompts, resources and "
        "notifications pass through; read-only tool calls go straight through, every other call is checked "
        "by the guard first and a blocked call never reaches the upstream. Give the upstream as a command "
        "after '--' (stdio) or with --upstream-url (streamable HTTP).",
        usage="policyguard mcp-proxy --policy P --checklist C [options] (--upstream-url URL | -- UPSTREAM_CMD ARG...)",
    )
    parser.add_argument("--policy", required=True, type=Path, help="the policy text (markdown)")
    parser.add_argument("--checklist", required=True, type=Path, help="the checklist YAML")
    parser.add_argument(
        "--model",
        default="none",
        help="verifier model: a LiteLLM name, 'openai-sdk:MODEL', 'anthropic-sdk:MODEL', 'scripted:FILE.json', "
        "or 'none' (default: the gate alone; what it cannot prove blocks unless --allow-unverified)",
    )
    parser.add_argument("--trace", type=Path, default=None, help="append every decision to this JSONL audit trace")
    parser.add_argument("--upstream-url", default=None, help="a streamable HTTP upstream, e.g. http://host:port/mcp")
    parser.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="serve streamable HTTP on HOST:PORT (path /mcp) instead of stdio; loopback only unless --allow-remote",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --listen use a non-loopback address (the proxy has no authentication of its own)",
    )
    parser.add_argument(
        "--allow-unverified",
        action="store_true",
        help="with --model none, a requirement that has no deterministic check (only a verifier could judge it) "
        "does not block the call; without this flag it does",
    )
    parser.add_argument(
        "--host-confirms",
        action="store_true",
        help="the MCP host asks the user before every tool call: a client without elicitation then counts as "
        "having asked, instead of blocking calls that need the user's confirmation",
    )
    parser.add_argument(
        "--elicitation-timeout", type=float, default=300.0, metavar="S", help="seconds the user has to confirm"
    )
    parser.add_argument(
        "--upstream-timeout", type=float, default=300.0, metavar="S", help="seconds one upstream request may take"
    )
    parser.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this environment variable to the upstream command (repeatable); by default it gets only the "
        "MCP SDK's short safe list (HOME, PATH, ...), never the proxy's model keys",
    )
    from policyguard.cli.server_flags import add_arguments

    add_arguments(parser)
    parser.add_argument("upstream", nargs=argparse.REMAINDER, help="-- UPSTREAM_CMD ARG... (stdio upstream)")
    parser.set_defaults(func=run)


def parse_listen(text: str, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); a non-loopback host needs ``allow_remote``."""
    host, sep, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"--listen {text!r}: {host} is not a loopback address; the proxy has no authentication of its own, "
            "so serving other machines needs --allow-remote"
        )
    return host, int(port_text)


def run(args: argparse.Namespace) -> int:
    command = list(args.upstream)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream_url):
        raise ConfigError("mcp-proxy: give the upstream either as a command after '--' or with --upstream-url")
    listen = parse_listen(args.listen, args.allow_remote) if args.listen else None
    for name, value in (
        ("--elicitation-timeout", args.elicitation_timeout),
        ("--upstream-timeout", args.upstream_timeout),
    ):
        if not value > 0:
            raise ConfigError(f"{name} must be a number of seconds above 0, got {value}")
    try:
        import anyio

        from policyguard.integrations import mcp_proxy, mcp_transport
    except ImportError as exc:
        raise ConfigError(f"mcp-proxy needs the MCP SDK ({exc.name} is missing): {install_hint('mcp')}") from None
    if sys.version_info >= (3, 11):
        from builtins import BaseExceptionGroup
    else:  # pragma: no cover - anyio brings the backport on 3.10
        from exceptiongroup import BaseExceptionGroup
    from policyguard.serve.server import from_args, with_health

    server = from_args(args)
    http_options = server.uvicorn() if listen else None  # fits the connection bound to ulimit -n, or says why not
    guard = _guard(args)
    settings = mcp_proxy.ProxySettings(
        host_confirms=args.host_confirms,
        elicitation_timeout_s=args.elicitation_timeout,
        upstream_timeout_s=args.upstream_timeout,
        allow_unverified=args.allow_unverified,
    )
    env = {name: os.environ[name] for name in args.pass_env if name in os.environ}
    upstream = mcp_transport.UpstreamSpec(command=command, url=args.upstream_url, env=env)

    def gone(reason: str) -> None:
        _stop(guard, f"policyguard: mcp-proxy: stopped: {reason}")

    try:
        anyio.run(
            lambda: mcp_transport.serve(
                guard,
                upstream,
                settings=settings,
                listen=listen,
                on_upstream_gone=gone,
                http_options=http_options,
                wrap_app=with_health,
            )
        )
    except BaseExceptionGroup as group:  # task groups wrap what failed; say the first real error in one line
        raise _first_error(group) from None
    except KeyboardInterrupt:
        return 130
    finally:
        guard.trace.close()
    return 0


def _stop(guard: Guard, message: str) -> NoReturn:
    """Say why and end the process now, from inside the event loop.

    The stdio transport reads stdin in a worker thread that returns only when the client closes its end,
    and the event loop's shutdown waits for that thread: a normal exit would leave the proxy running,
    silent, after its upstream died.
    """
    print(message, file=sys.stderr)
    guard.trace.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _guard(args: argparse.Namespace) -> Guard:  # type: ignore[no-untyped-def]
    from policyguard.guard.core import Guard

    try:
        guard = Guard.from_files(policy=args.policy, checklist=args.checklist, model=args.model, trace_path=args.trace)
    except OSError as exc:  # a file named by --model
        raise ConfigError(f"{exc.filename or 'a file'}: cannot open: {exc.strerror or exc}") from None
    if args.allow_unverified and guard.verifier is None:
        print(
            "policyguard: WARNING: mcp-proxy --allow-unverified: requirements only a verifier could judge are "
            "not checked; calls the gate cannot disprove are allowed",
            file=sys.stderr,
        )
    return guard


def _first_error(group: BaseException) -> BaseException:
    for exc in getattr(group, "exceptions", ()):
        if hasattr(exc, "exceptions"):
            return _first_error(exc)
        if isinstance(exc, ConfigError):
            return exc
    first = getattr(group, "exceptions", (group,))[0]
    return ConfigError(f"mcp-proxy failed: {type(first).__name__}: {first}")
