"""One server configuration for every HTTP surface: ``serve``, ``review`` and ``mcp-proxy --listen``.

Each surface runs uvicorn behind the same limits (:class:`ServerSettings`), set by the same flags
(:func:`policyguard.cli.server_flags.add_arguments`, which imports nothing heavy):

========================  ===================  =================================================
flag                      default              what it bounds
========================  ===================  =================================================
``--header-timeout``      10 s                 a request's headers, from connect or last response
``--body-timeout``        30 s                 a request's body, once its headers are in (slow body)
``--keep-alive``          5 s                  an idle connection between requests
``--max-connections``     256 (fits ulimit)    open connections per process (see :mod:`.connections`)
``--max-body-bytes``      4 MiB                a request's body: past it the answer is 413 and close
========================  ===================  =================================================

Every surface also answers ``GET /healthz`` from the event loop itself (:func:`with_health`), before
any route, login or decision: a health probe never waits on a decision.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .body import MAX_BODY_BYTES
from .connections import ACCEPT_BATCH, HEADER_TIMEOUT_S, ConnectionLimits, fit_open_files

BODY_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 5.0
SWITCH_INTERVAL_S = 0.001  # how long a thread may hold the interpreter lock while another waits (Python: 5 ms)


def share_the_interpreter(interval_s: float = SWITCH_INTERVAL_S) -> None:
    """Let the event loop take the interpreter lock from a deciding thread within ``interval_s``.

    Decisions run in threads, and their CPU work (the gate's estimates, the engine's conversions)
    holds the lock the event loop needs to answer ``/healthz``. At Python's default 5 ms a probe
    that needs the lock a few times over (accept, read, write) waits a few times 5 ms per deciding
    thread ahead of it. For one server process, set at its start.
    """
    import sys

    sys.setswitchinterval(interval_s)


class ServerSettings(BaseModel):
    """The limits of one HTTP surface; ``max_connections`` None is the default bound fitted to ``ulimit -n``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    header_timeout_s: float = Field(default=HEADER_TIMEOUT_S, gt=0)
    body_timeout_s: float = Field(default=BODY_TIMEOUT_S, gt=0)
    keep_alive_s: float = Field(default=KEEP_ALIVE_S, gt=0)
    max_connections: int | None = Field(default=None, ge=1)
    max_body_bytes: int = Field(default=MAX_BODY_BYTES, ge=1)

    def limits(self) -> ConnectionLimits:
        """The protocol factory enforcing these limits (the connection bound fitted to the open-file limit)."""
        return ConnectionLimits(
            self.header_timeout_s,
            fit_open_files(self.max_connections),
            body_timeout_s=self.body_timeout_s,
            max_body_bytes=self.max_body_bytes,
        )

    def uvicorn(self, limits: ConnectionLimits | None = None) -> dict[str, Any]:
        """Keyword arguments of ``uvicorn.Config`` for these limits."""
        return {
            "http": limits or self.limits(),
            "timeout_keep_alive": self.keep_alive_s,
            "backlog": ACCEPT_BATCH,
            "access_log": False,
        }


def from_args(args: argparse.Namespace) -> ServerSettings:
    """The settings of the server flags (:mod:`policyguard.cli.server_flags`); a bad value: ConfigError naming it."""
    from pydantic import ValidationError

    from policyguard.errors import ConfigError

    given = {
        "header_timeout_s": args.header_timeout,
        "body_timeout_s": args.body_timeout,
        "keep_alive_s": args.keep_alive,
        "max_connections": args.max_connections,
        "max_body_bytes": args.max_body_bytes,
    }
    flags = {"header_timeout_s": "--header-timeout", "body_timeout_s": "--body-timeout", "keep_alive_s": "--keep-alive",
             "max_connections": "--max-connections", "max_body_bytes": "--max-body-bytes"}  # fmt: skip
    try:
        return ServerSettings(**{key: value for key, value in given.items() if value is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = flags.get(str(error["loc"][0]), str(error["loc"][0]))
        raise ConfigError(f"{flag} {given.get(str(error['loc'][0]))}: {error['msg']}") from None


_HEALTH = json.dumps({"ok": True}).encode()


def with_health(app: Any) -> Any:
    """``app`` behind a ``GET /healthz`` answered at once, before its routes, login or decisions."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD"):
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_HEALTH)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": _HEALTH if scope["method"] == "GET" else b""})
            return
        await app(scope, receive, send)

    return asgi
