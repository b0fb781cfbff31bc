"""One loopback test for every server PolicyGuard starts (serve, review, mcp-proxy)."""

from __future__ import annotations

import pytest

from policyguard.loopback import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LocalHost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["0.0.0.0", "::", "[::]", "192.0.2.10", "10.0.0.1", "example.org", "localhost.example.org", "", "127.0.0.1 "],
)
def test_everything_else_may_be_reached_from_elsewhere(host: str) -> None:
    assert not is_loopback(host)
