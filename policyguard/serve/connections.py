"""How many connections ``policyguard serve`` holds, and how long a request's headers may take.

uvicorn (h11) waits for a request's headers as long as the client likes and accepts connections
until the process runs out of files: 1,100 connections that never finished their headers made
``/healthz`` unreachable. Its own knobs do not cover this: ``limit_concurrency`` answers 503 only
after a request's headers arrived on a connection it already accepted, and ``timeout_keep_alive``
starts only after a response. So every connection of :class:`ConnectionLimits`:

* must complete a request's headers within ``header_timeout_s`` of opening, or of its previous
  response, or it is closed (``timeout_keep_alive`` still closes one that sends nothing sooner);
* counts against ``max_connections``. At the bound a new connection closes the one that has waited
  longest for headers (half-open, or idle between requests, as nginx reuses idle keep-alive
  connections), so no number of half-open connections keeps a health probe out; when every
  connection is busy with a request, the new one is answered 503 and closed;
* must send a request's body within ``body_timeout_s`` of its headers (a slow body is closed), and
  no more than ``max_body_bytes`` of it (past that, with room for framing, the answer is 413 and close;
  an app with its own body limit answers first).

The bound must fit the process's open-file limit, or ``accept`` fails before it is reached:
:func:`fit_open_files` raises the soft limit when it can and otherwise lowers the default bound
(or refuses an explicit one).
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from policyguard.errors import ConfigError

HEADER_TIMEOUT_S = 10.0  # headers take milliseconds; this is room for a loaded host, as eviction guards the bound
MAX_CONNECTIONS = 256  # beyond the 40 threads that decide, a connection only waits; idle ones make room
RESERVED_FILES = 512  # listener, store, trace, thread-pool files (~150 measured), accepted sockets not yet counted
ACCEPT_BATCH = 128  # uvicorn's backlog: also the sockets asyncio accepts in one pass, before any is counted


class ConnectionLimits:
    """uvicorn's ``http=`` protocol factory: h11 with a header timeout and a connection bound."""

    def __init__(
        self,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        *,
        body_timeout_s: float | None = None,
        max_body_bytes: int | None = None,
    ) -> None:
        if not header_timeout_s > 0:
            raise ConfigError(f"--header-timeout must be a positive number of seconds, got {header_timeout_s}")
        if max_connections < 1:
            raise ConfigError(f"--max-connections must be at least 1, got {max_connections}")
        self.header_timeout_s = header_timeout_s
        self.max_connections = max_connections
        self.body_timeout_s = body_timeout_s
        self.max_body_bytes = max_body_bytes
        self.open: set[_BoundedH11] = set()
        self.waiting: dict[_BoundedH11, None] = {}  # awaiting a request's headers, longest first

    def __call__(self, **kwargs: Any) -> asyncio.Protocol:
        return _BoundedH11(self, **kwargs)

    def busy_response(self) -> bytes:
        body = json.dumps({"error": f"all {self.max_connections} connections are busy; do not run the call, retry"})
        head = f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        return f"{head}connection: close\r\nretry-after: 1\r\n\r\n{body}".encode("ascii")

    def too_large_response(self) -> bytes:
        body = json.dumps({"error": f"the request body is over {self.max_body_bytes} bytes"})
        head = f"HTTP/1.1 413 Content Too Large\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        return f"{head}connection: close\r\n\r\n{body}".encode("ascii")


FRAMING_BYTES = 64 * 1024  # headers and chunk framing counted with the body; the app's own limit answers first


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once (TCP_NODELAY). h11 writes a response's headers and body apart; with Nagle's
    algorithm on, the body waited for the client's delayed ACK of the headers: 44 ms per request on a kept-alive
    connection, against 1 ms on a new one. asyncio sets the option only on sockets made with ``IPPROTO_TCP``
    as their protocol, which a listening socket made with the defaults (protocol 0) does not pass on."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # a socket already closed by the peer: nothing is sent on it anyway
            pass


class _BoundedH11(H11Protocol):
    def __init__(self, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limits = limits
        self.header_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.body_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _no_delay(transport)
        limits = self.limits
        if len(limits.open) >= limits.max_connections:
            if not limits.waiting:
                transport.write(limits.busy_response())
                transport.close()
                return
            next(iter(limits.waiting)).drop()
        limits.open.add(self)
        self._follow()

    def data_received(self, data: bytes) -> None:
        limit = self.limits.max_body_bytes
        if limit is not None and self.conn.their_state is not h11.IDLE:
            self.body_bytes += len(data)
            if self.body_bytes > limit + FRAMING_BYTES:
                self._refuse(self.limits.too_large_response())
                return
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Start the header clock when the connection awaits a request's headers; stop it once they are in."""
        if self.transport.is_closing():
            self._forget()
        elif self.conn.their_state is h11.IDLE:
            self.body_bytes = 0
            if self.header_timer is None:
                self.limits.waiting[self] = None
                self.header_timer = self.loop.call_later(self.limits.header_timeout_s, self.drop)
        else:
            self.limits.waiting.pop(self, None)
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None
            if self.conn.their_state is h11.SEND_BODY:
                if self.body_timer is None and self.limits.body_timeout_s is not None:
                    self.body_timer = self.loop.call_later(self.limits.body_timeout_s, self.drop)
            elif self.body_timer is not None:
                self.body_timer.cancel()
                self.body_timer = None

    def _forget(self) -> None:
        self.limits.waiting.pop(self, None)
        self.limits.open.discard(self)
        for timer in (self.header_timer, self.body_timer):
            if timer is not None:
                timer.cancel()
        self.header_timer = self.body_timer = None

    def _refuse(self, response: bytes) -> None:
        self._forget()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    def drop(self) -> None:
        """Close a connection waiting for headers or a body: too slow, or a newer connection needs its slot."""
        self._forget()
        if not self.transport.is_closing():  # closing already (the keep-alive timeout, the client left): let it
            self.transport.abort()  # nothing to flush; the file is released now, not after a lingering close


def fit_open_files(max_connections: int | None) -> int:
    """The connection bound: ``max_connections`` (default :data:`MAX_CONNECTIONS`) if the open-file limit allows.

    The soft limit is raised toward the hard one when it is too low. If it still is, the default
    bound shrinks to fit; an explicit ``--max-connections`` is a :class:`ConfigError` instead.
    """
    wanted = MAX_CONNECTIONS if max_connections is None else max_connections
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: no such limit to fit
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVED_FILES
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    if max_connections is not None:
        raise ConfigError(
            f"--max-connections {max_connections} needs {need} open files, and this process may open {soft} "
            "(ulimit -n): lower it or raise the limit"
        )
    if soft - RESERVED_FILES < 1:
        raise ConfigError(f"the open-file limit (ulimit -n) is {soft}: serve needs more than {RESERVED_FILES}")
    return soft - RESERVED_FILES
