"""Test-wide guards: no real model call and no outbound socket, ever.

Any attempt to open a non-loopback connection is recorded and fails the test
at teardown, even when the code under test caught the error (the verifier fails
closed, so a swallowed network error would otherwise pass silently).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The Agents SDK's tracing starts a background thread that would upload spans to OpenAI and keeps
# running for the rest of the session; tests that run an agent never need it.
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
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


@functools.cache
def _pgserver() -> ModuleType:
    """tests/pgserver.py, loaded by path (the tests are not a package)."""
    spec = importlib.util.spec_from_file_location("policyguard_tests_pgserver", Path(__file__).with_name("pgserver.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the session: $POLICYGUARD_TEST_POSTGRES_URL, else a throwaway cluster.

    Skips with the reason when no server can be had; under $CI it fails instead,
    so CI never passes by skipping the PostgreSQL half of the contract suite.
    """
    pg = _pgserver()
    with ExitStack() as stack:
        try:
            pg.check_psycopg()
            url = os.environ.get(pg.ENV) or stack.enter_context(pg.throwaway_cluster())
            pg.check_reachable(url)
        except pg.NoServer as exc:
            if os.environ.get("CI"):
                pytest.fail(f"CI needs a PostgreSQL server for the store tests: {exc}")
            pytest.skip(f"no PostgreSQL server (set {pg.ENV} or install postgresql): {exc}")
        yield url


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A URL to a fresh, empty schema of the session's server, dropped after the test."""
    with _pgserver().fresh_schema(postgres_url) as url:
        yield url
