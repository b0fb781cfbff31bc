"""One loopback test for every server PolicyGuard starts (serve, review, mcp-proxy)."""

from __future__ import annotations

import pytest

from policyguard.loopback import is_loopback, loopback_names


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LocalHost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["0.0.0.0", "::", "[::]", "192.0.2.10", "10.0.0.1", "example.org", "localhost.example.org", "", "127.0.0.1 "],
)
def test_everything_else_may_be_reached_from_elsewhere(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    "host, own", [("127.0.0.1", "127.0.0.1"), ("127.0.0.2", "127.0.0.2"), ("::1", "[::1]"), ("[::1]", "[::1]"),
                  ("LocalHost", "localhost")],
)  # fmt: skip
def test_a_loopback_listener_is_named_by_its_address_and_the_loopback_names_as_a_host_header_spells_them(
    host: str, own: str
) -> None:
    assert loopback_names(host) == sorted({own, "127.0.0.1", "[::1]", "localhost"})
