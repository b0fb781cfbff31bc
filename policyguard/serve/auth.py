"""Who may call ``/v1/*``: a bearer token from the environment, compared in constant time.

On a loopback address a token is optional (a sidecar next to the agent); on any
other address the server refuses to start without one, because then anyone
who can reach the port could mint grants. When a token is set it is required
on ``/v1/*`` whatever the address. The token authenticates the *integrator*
(the agent runtime), which then states the ``principal`` the agent acts for.
"""

from __future__ import annotations

import hmac

from policyguard.errors import ConfigError
from policyguard.loopback import is_loopback

TOKEN_ENV = "POLICYGUARD_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16


def server_token(host: str, token: str | None) -> str | None:
    """The token the server will require, or None on loopback without one; ConfigError when unsafe."""
    if token is not None and token.strip() != token:
        raise ConfigError(f"{TOKEN_ENV}: the token has leading or trailing whitespace")
    if token:
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{TOKEN_ENV}: the token is shorter than {MIN_TOKEN_CHARS} characters")
        if not token.isascii() or not token.isprintable():
            raise ConfigError(f"{TOKEN_ENV}: the token must be printable ASCII")
        return token
    if not is_loopback(host):
        raise ConfigError(
            f"--host {host} is not a loopback address: set {TOKEN_ENV} (at least {MIN_TOKEN_CHARS} characters) "
            "so /v1/* requires a bearer token"
        )
    return None


def authorized(expected: str | None, header: str | None) -> bool:
    """Whether an ``Authorization`` header carries the expected bearer token (always True with no token set)."""
    if expected is None:
        return True
    if header is None:
        return False
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8", "replace"), expected.encode("ascii"))
