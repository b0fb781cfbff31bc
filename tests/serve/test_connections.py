"""Connections that never finish their headers: closed after the header timeout, and never enough to keep /healthz out.

Real `policyguard serve` processes and real sockets on loopback; every socket a test opens, it closes.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from policyguard.errors import ConfigError
from policyguard.serve import connections

from .conftest import CHECKLIST, POLICY

BASE = ["--policy", str(POLICY), "--checklist", str(CHECKLIST)]
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # the blank line that ends the headers never comes


def _address(replica: Any) -> tuple[str, int]:
    return "127.0.0.1", int(replica.url.rsplit(":", 1)[1])


@contextmanager
def half_open(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that sent part of their headers; all closed on exit."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address, timeout=5)
            opened.append(sock)
            sock.sendall(PARTIAL)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _healthz(address: tuple[str, int], timeout: float = 5.0) -> tuple[bytes, float]:
    """The status line of GET /healthz on a fresh connection, and the seconds it took."""
    started = time.monotonic()
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = sock.recv(4096)
    return answer.split(b"\r\n", 1)[0], time.monotonic() - started


def _closed_after(sock: socket.socket, limit: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (reading EOF or a reset), sending ``trickle`` a byte at a time."""
    started = time.monotonic()
    sock.settimeout(0.2)
    for byte in trickle * 1000:
        if time.monotonic() - started > limit:
            return None
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(4096) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:  # reset by the server
            return time.monotonic() - started
    while time.monotonic() - started < limit:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
    return None


def test_more_half_open_connections_than_open_files_do_not_keep_healthz_out(replicas: Any) -> None:
    """The report: more never-finished connections than the process may open files made /healthz unreachable.

    With 640 open files the default bound shrinks to fit; past it, each new connection closes the one
    that has waited longest for its headers.
    """
    server = replicas("flooded", BASE, open_files=640)
    address = _address(server)
    with half_open(address, 700) as flood:
        status, seconds = _healthz(address)
        assert status == b"HTTP/1.1 200 OK" and seconds < 1.0, (status, seconds)
        evicted = sum(_closed_after(sock, 0.01) is not None for sock in flood[:400])
    assert evicted == 400  # the oldest were closed to make room for the newest 128
    assert "at most 128 connections" in server.output[0]


def test_a_connection_that_never_completes_its_headers_is_closed_after_the_header_timeout(replicas: Any) -> None:
    """Trickling bytes does not extend the clock; nor does a finished request before the unfinished one."""
    server = replicas("timeouts", [*BASE, "--header-timeout", "1"])
    address = _address(server)
    with (
        socket.create_connection(address, timeout=5) as trickler,
        socket.create_connection(address, timeout=5) as reuser,
    ):
        reuser.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert reuser.recv(4096).startswith(b"HTTP/1.1 200 OK")
        reuser.sendall(PARTIAL)
        trickled = _closed_after(trickler, 5.0, trickle=PARTIAL)
        reused = _closed_after(reuser, 5.0)
    assert trickled is not None and 0.8 < trickled < 3.0, trickled
    assert reused is not None and reused < 3.0, reused
    assert _healthz(address)[0] == b"HTTP/1.1 200 OK"


def test_when_every_connection_is_busy_with_a_request_a_new_one_is_answered_503(replicas: Any) -> None:
    """Busy connections (headers in, body awaited) are never closed for a newcomer; it is told to retry."""
    server = replicas("busy", [*BASE, "--max-connections", "3"])
    address = _address(server)
    busy_request = (b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                    b"content-length: 100\r\n\r\n")  # fmt: skip
    busy = [socket.create_connection(address, timeout=5) for _ in range(3)]
    try:
        for sock in busy:
            sock.sendall(busy_request)
        time.sleep(0.5)  # the server has read their headers
        with socket.create_connection(address, timeout=5) as newcomer:
            answer = newcomer.recv(4096)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head
        assert "do not run the call" in json.loads(body)["error"]
    finally:
        for sock in busy:
            sock.close()
    time.sleep(0.5)
    assert _healthz(address)[0] == b"HTTP/1.1 200 OK"


class TestOpenFileLimit:
    """The bound fits the open-file limit, or accept() fails before the bound is reached."""

    @pytest.fixture
    def limit(self, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
        import resource

        state = {"soft": 1024, "hard": 1024}
        monkeypatch.setattr(resource, "getrlimit", lambda kind: (state["soft"], state["hard"]))

        def setrlimit(kind: int, limits: tuple[int, int]) -> None:
            if limits[0] > state["hard"]:
                raise ValueError("not allowed to raise maximum limit")
            state["soft"] = limits[0]

        monkeypatch.setattr(resource, "setrlimit", setrlimit)
        return state

    def test_the_default_bound_fits_the_common_limit_of_1024_files(self, limit: dict[str, int]) -> None:
        assert connections.fit_open_files(None) == connections.MAX_CONNECTIONS == 256
        assert limit["soft"] == 1024

    def test_the_soft_limit_is_raised_when_the_hard_one_allows(self, limit: dict[str, int]) -> None:
        limit.update(soft=256, hard=65536)
        assert connections.fit_open_files(2000) == 2000
        assert limit["soft"] == 2000 + connections.RESERVED_FILES

    def test_otherwise_the_default_bound_shrinks_and_an_explicit_one_is_refused(self, limit: dict[str, int]) -> None:
        limit.update(soft=700, hard=700)
        assert connections.fit_open_files(None) == 700 - connections.RESERVED_FILES
        with pytest.raises(ConfigError, match=r"--max-connections 512 needs 1024 open files.*700 \(ulimit -n\)"):
            connections.fit_open_files(512)
        limit.update(soft=500, hard=500)
        with pytest.raises(ConfigError, match="ulimit -n"):
            connections.fit_open_files(None)


@pytest.mark.parametrize("flag, value", [("--header-timeout", "0"), ("--max-connections", "0")])
def test_a_bad_limit_is_refused_at_start_in_one_line(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from policyguard.cli import main

    code = main(["serve", *BASE, "--port", "0", flag, value])
    err = capsys.readouterr().err
    assert code == 2 and flag in err and err.count("\n") == 1


def test_every_connection_sends_each_write_at_once() -> None:
    """TCP_NODELAY on every accepted connection, whatever the listening socket's protocol number: h11 writes
    the headers and the body apart, and with Nagle's algorithm a kept-alive connection's body waited for the
    client's delayed ACK (44 ms a request, measured with bench_serve at one client)."""
    import asyncio
    import threading

    import uvicorn

    from policyguard.cli.cmd_serve import _bind
    from policyguard.serve.server import with_health

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # only /healthz is asked
        raise AssertionError(scope)

    limits = connections.ConnectionLimits()
    sock = _bind("127.0.0.1", 0)  # protocol 0, as serve binds it: asyncio would not set the option itself
    server = uvicorn.Server(uvicorn.Config(with_health(app), http=limits, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(sock.getsockname()[:2], timeout=5) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            (protocol,) = limits.open
            accepted = protocol.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
