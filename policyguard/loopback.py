"""Whether a listening address stays on this machine: one answer for every server PolicyGuard starts.

``serve``, ``review`` and ``mcp-proxy`` listen on loopback unless told otherwise;
a non-loopback address needs a token or an explicit opt-in. Only addresses that
are loopback by definition count: 127.0.0.0/8, ``::1`` (bracketed or not) and
the name ``localhost`` (in any case, as host names are). ``0.0.0.0``, ``::``
and every other name are not: a name could resolve anywhere.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ``::1``, ``[::1]`` and ``localhost``; False for everything else."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ("127.0.0.1", "[::1]", "localhost")


def loopback_names(host: str) -> list[str]:
    """The names, as a ``Host`` header spells them, that a client on this machine uses for a listener on ``host``.

    ``host`` itself (an IPv6 address in brackets) and 127.0.0.1, [::1], localhost. A server on
    loopback answers only requests naming one of them, so a web page that re-points its own name
    at 127.0.0.1 (DNS rebinding) is refused.
    """
    shown = f"[{host.strip('[]')}]" if ":" in host else host.lower()
    return sorted({shown, *LOOPBACK_NAMES})
