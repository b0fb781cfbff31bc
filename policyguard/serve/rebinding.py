"""Which ``Host`` and ``Origin`` a request may carry, so a web page cannot use the server through the browser.

A page on ``evil.example`` that re-points its name at 127.0.0.1 (DNS rebinding) can post to a
loopback server from the user's browser, as the same origin: without a token it would get signed
grants. Its requests say ``Host: evil.example:8700`` and carry an ``Origin``; an agent or a tool
service names the server and, not being a browser, sends no ``Origin``. So:

* **Host** (421 otherwise): on a loopback listener, one of :func:`~policyguard.loopback.loopback_names`
  or an ``--allowed-host``, on any port. Off loopback the server cannot know the names clients use
  (a load balancer, a DNS name), so ``Host`` is checked only once ``--allowed-host`` lists them;
  there the bearer token, required off loopback, is what keeps a page out.
* **Origin** (403 otherwise): a request that carries one, on any listener, must come from an
  ``--allowed-origin`` (``scheme://host[:port]``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from policyguard.errors import ConfigError
from policyguard.loopback import is_loopback, loopback_names

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_SHOWN = 80  # characters of a refused header value quoted back


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header (an IPv6 address in brackets), lower case; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        if not bracket:
            return None
        name += "]"
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            return None
    else:
        name, colon, port_text = value.partition(":")
        port = port_text if colon else None
    if port is not None and not (port.isascii() and port.isdigit()):
        return None
    return name or None


def _allowed_host(value: str) -> str:
    """An ``--allowed-host`` value as a ``Host`` header names it; ConfigError when it is not a bare name or address."""
    text = value.strip().lower()
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        if _NAME.fullmatch(text):
            return text
        raise ConfigError(
            f"--allowed-host {value!r}: not a host name or address (give it without scheme or port)"
        ) from None
    return f"[{address}]" if address.version == 6 else str(address)


def _allowed_origin(value: str) -> str:
    """An ``--allowed-origin`` value as a browser sends it; ConfigError when it is not ``scheme://host[:port]``."""
    text = value.strip().lower().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or parts.fragment:
        raise ConfigError(f"--allowed-origin {value!r}: not an origin like https://console.example.com[:port]")
    if "@" in parts.netloc:
        raise ConfigError(f"--allowed-origin {value!r}: an origin has no user name")
    return text


@dataclass(frozen=True)
class HostCheck:
    """The ``Host`` names (None: any) and the ``Origin`` values a server accepts."""

    hosts: frozenset[str] | None
    origins: frozenset[str]

    @classmethod
    def for_listener(
        cls, host: str, allowed_hosts: tuple[str, ...] = (), allowed_origins: tuple[str, ...] = ()
    ) -> HostCheck:
        """The check for a server listening on ``host``; ConfigError naming a malformed extra value."""
        extra = {_allowed_host(value) for value in allowed_hosts}
        origins = frozenset(_allowed_origin(value) for value in allowed_origins)
        if not is_loopback(host) and not extra:
            return cls(None, origins)
        listener = "localhost" if host.strip("[]") in ("0.0.0.0", "::") else host  # no client names a wildcard
        return cls(frozenset({*loopback_names(listener), *extra}), origins)

    def refusal(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        """The status and one-line message refusing a request with these headers, or None to let it through."""
        if self.hosts is not None:
            if host is None:
                return 421, "the request has no Host header; this server answers only requests that name it"
            if host_name(host) not in self.hosts:
                return 421, (f"Host {host[:_SHOWN]!r} is not a name this server answers to (DNS rebinding "
                             "protection); start it with --allowed-host NAME to add one")  # fmt: skip
        if origin is not None and origin.strip().lower().rstrip("/") not in self.origins:
            return 403, (f"Origin {origin[:_SHOWN]!r} is not allowed: browsers may call this server only from "
                         "an origin started with --allowed-origin")  # fmt: skip
        return None
