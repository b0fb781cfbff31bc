"""Test-wide guards: no real model call and no outbound socket, ever.

Any attempt to open a non-loopback connection is recorded and fails the test
at teardown, even when the code under test caught the error (the verifier fails
closed, so a swallowed network error would otherwise pass silently).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
    if not os.environ.get("POLICYGUARD_LIVE_TESTS"):
        os.environ.pop(_key, None)

_LOOPBACK = ("127.", "::1", "localhost")


def _is_loopback(address: object) -> bool:
    if isinstance(address, tuple) and address:
        host = str(address[0])
        return host.startswith(_LOOPBACK)
    return True  # AF_UNIX paths and the like


@pytest.fixture(autouse=True)
def no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("live"):
        yield
        return
    attempts: list[object] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def guarded_connect(self: socket.socket, address: object) -> None:
        if not _is_loopback(address):
            attempts.append(address)
            raise OSError(f"network access is disabled in tests (tried {address!r})")
        return real_connect(self, address)  # type: ignore[arg-type]

    def guarded_connect_ex(self: socket.socket, address: object) -> int:
        if not _is_loopback(address):
            attempts.append(address)
            raise OSError(f"network access is disabled in tests (tried {address!r})")
        return real_connect_ex(self, address)  # type: ignore[arg-type]

    def guarded_getaddrinfo(host: object, *args: object, **kwargs: object) -> list:  # type: ignore[type-arg]
        if host is not None and not str(host).startswith(_LOOPBACK):
            attempts.append(host)
            raise OSError(f"DNS lookups are disabled in tests (tried {host!r})")
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    real_getaddrinfo = socket.getaddrinfo
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    yield
    if attempts:
        pytest.fail(f"test tried to reach the network: {attempts!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("live")
        if marker is None:
            continue
        keys = marker.kwargs.get("keys") or marker.args or ("OPENAI_API_KEY",)
        if not os.environ.get("POLICYGUARD_LIVE_TESTS") or not any(os.environ.get(k) for k in keys):
            item.add_marker(pytest.mark.skip(reason=f"live test: set POLICYGUARD_LIVE_TESTS=1 and one of {keys}"))
