"""``policyguard serve``: the guard as an HTTP service (extra ``[serve]``: Starlette and uvicorn)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from policyguard.distribution import install_hint
from policyguard.errors import ConfigError

DEFAULT_PORT = 8700


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "serve",
        help="serve POST /v1/check, the grant JWKS, health and metrics over HTTP",
        description="Run the guard as an HTTP service. Set POLICYGUARD_SERVE_TOKEN to require a bearer token on "
        "/v1/* (required on a non-loopback --host).",
    )
    parser.add_argument("--policy", required=True, type=Path, help="the policy text (markdown)")
    parser.add_argument("--checklist", required=True, type=Path, help="the checklist YAML")
    parser.add_argument(
        "--model",
        default="none",
        help="verifier model: a LiteLLM name, 'openai-sdk:MODEL', 'anthropic-sdk:MODEL', 'scripted:FILE.json' or "
        "'none' (gate only; default)",
    )
    parser.add_argument(
        "--mode",
        choices=("checklist", "raw", "raw_traj", "checklist_only"),
        default="checklist",
        help="what the verifier model is shown (as for verify; default checklist)",
    )
    parser.add_argument(
        "--store",
        default="sqlite:///:memory:",
        help="nonces, denials and the ledger: sqlite:///path.db (one file shared by the replicas of one host) "
        "or postgresql://... (several hosts); default sqlite:///:memory: (one process only)",
    )
    parser.add_argument("--trace", type=Path, default=None, help="append the audit trace to this JSONL file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name clients use for this server (repeatable); on loopback only the loopback names and "
        "--host are answered (421 otherwise: DNS rebinding protection); off loopback, listing names turns the check on",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin (https://host[:port]) allowed to call the server (repeatable); a request from any "
        "other Origin is refused (403)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    parser.add_argument(
        "--grant-key",
        type=Path,
        default=None,
        help="Ed25519 private key (PEM) that signs a grant for every allow; without it no grants are issued",
    )
    parser.add_argument(
        "--publish-key",
        type=Path,
        action="append",
        default=[],
        help="an extra Ed25519 public key (PEM) to publish in the JWKS (key rotation: the previous or next key); "
        "repeatable",
    )
    parser.add_argument("--grant-ttl", type=int, default=120, help="grant lifetime in seconds (default 120)")
    parser.add_argument(
        "--unknown-tools",
        choices=("block", "check"),
        default="block",
        help="a tool the checklist does not name: block it (default) or judge it as mutating (opt-in)",
    )
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="shadow mode: no checklist requirement blocks; each decision's shadow_blocked names those that "
        "would have; errors, missing evidence and an effect's money rules still block (one worker)",
    )
    parser.add_argument(
        "--decision-timeout",
        type=float,
        default=60.0,
        help="seconds a check may take before the answer is 503, do not run the call (default 60)",
    )
    parser.add_argument(
        "--cel-workers",
        type=int,
        default=None,
        help="processes that evaluate checks over the in-process budget, each killed past its time (default: "
        "the core count)",
    )
    parser.add_argument(
        "--cel-queue",
        type=int,
        default=None,
        help="checks that may wait for such a process; one more is blocked at once (default 4 per process)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes on one socket, sharing --store like replicas (default 1; more needs a store "
        "several processes can open, and each worker writes TRACE.<pid>.jsonl)",
    )
    parser.add_argument("--replica", default="", help="this process's name in traces and /healthz (default pid-N)")
    parser.add_argument(
        "--demo-effects",
        type=Path,
        default=None,
        help="enable POST /v1/execute, a demo executor whose tools append one line per effect to this file "
        "(tests and demos only)",
    )
    parser.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="uvicorn log level (default info)",
    )
    from policyguard.cli.server_flags import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=run)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--host {host} --port {port}: cannot listen: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from policyguard.serve import ServeConfig, build_service, create_app
        from policyguard.serve.auth import TOKEN_ENV, server_token
        from policyguard.serve.server import from_args, share_the_interpreter
    except ImportError as exc:
        hint = install_hint("serve")
        raise ConfigError(f"policyguard serve needs the 'serve' extra: {hint} ({exc})") from None
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a port number")
    token = server_token(args.host, os.environ.get(TOKEN_ENV) or None)
    server = from_args(args)
    config = ServeConfig(
        policy=args.policy,
        checklist=args.checklist,
        model=args.model,
        mode=args.mode,
        store=args.store,
        trace=args.trace,
        grant_key=args.grant_key,
        publish_keys=tuple(args.publish_key),
        grant_ttl_s=args.grant_ttl,
        unknown_tools=args.unknown_tools,
        token=token,
        max_body_bytes=server.max_body_bytes,
        decision_timeout_s=args.decision_timeout,
        replica=args.replica,
        demo_effects=args.demo_effects,
        host=args.host,
        allowed_hosts=tuple(args.allowed_host),
        allowed_origins=tuple(args.allowed_origin),
    )
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.workers > 1 and args.store.endswith(":memory:"):
        raise ConfigError("--workers above 1 needs a shared --store (sqlite:///path.db or postgresql://...): "
                          "workers with private memory stores would not share spent nonces or denials")  # fmt: skip
    if args.shadow and args.workers > 1:
        raise ConfigError("--shadow serves one worker for now: drop --workers or run without --shadow")
    limits = server.limits()
    share_the_interpreter()  # also in each --workers process (policyguard.serve.worker)
    _configure_cel_pool(args.cel_workers, args.cel_queue)
    service = build_service(config)  # also in the parent with --workers: a bad setting fails here, once
    if args.shadow:
        from policyguard.guard.shadow import shadowed_checklist

        service.base.checklist = shadowed_checklist(service.base.checklist)
        print("policyguard serve: shadow mode: no requirement blocks; decisions name those that would "
              "(shadow_blocked)", file=sys.stderr)  # fmt: skip
    sock = _bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(
        f"policyguard serve: listening on http://{shown}:{port} (replica {service.replica}, "
        f"store {args.store.split('://', 1)[0]}, token {'required' if token else 'off (loopback)'}, "
        f"at most {limits.max_connections} connections, headers within {limits.header_timeout_s:g} s)",
        flush=True,
    )
    settings = {"log_level": args.log_level, "lifespan": "off", "timeout_graceful_shutdown": 5,
                **server.uvicorn(limits)}  # fmt: skip
    if args.workers > 1:
        return _run_workers(service, config, sock, args.workers, settings)
    uvicorn.Server(uvicorn.Config(create_app(service), **settings)).run(sockets=[sock])  # type: ignore[arg-type]
    sys.stdout.flush()
    return 0


def _configure_cel_pool(workers: int | None, queue: int | None) -> None:
    if workers is not None and workers < 1:
        raise ConfigError(f"--cel-workers must be at least 1, got {workers}")
    if queue is not None and queue < 0:
        raise ConfigError(f"--cel-queue must be 0 or more, got {queue}")
    from policyguard.gate import celprocess

    if workers is not None:
        os.environ[celprocess.WORKERS_ENV] = str(workers)  # --workers processes read it too
    if queue is not None:
        os.environ[celprocess.QUEUE_ENV] = str(queue)
    celprocess.configure(workers, queue)


def _run_workers(service: Any, config: Any, sock: socket.socket, workers: int, settings: dict[str, Any]) -> int:
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from policyguard.serve.worker import CONFIG_ENV

    service.trace.close()  # the parent only checked the settings; each worker opens its own
    close = getattr(service.store.inner, "close", None)
    if close is not None:
        close()
    os.environ[CONFIG_ENV] = config.model_dump_json()
    uvicorn_config = uvicorn.Config("policyguard.serve.worker:app_from_env", factory=True, workers=workers, **settings)
    Multiprocess(uvicorn_config, sockets=[sock]).run()
    sys.stdout.flush()
    return 0
