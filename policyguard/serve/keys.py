"""Grant keys as a JWKS: the public half of every key a tool service may meet.

A tool service in any language verifies a grant with a standard JOSE library:
it fetches ``/.well-known/jwks.json``, picks the key whose ``kid`` the grant's
header names, and checks the EdDSA signature. The ``kid`` is the key's RFC 7638
thumbprint, so it is derived from the key itself and never collides by accident.

Rotation: the server signs with one private key (``--grant-key``) and
publishes its public key first, followed by every ``--publish-key`` (the
previous key, until the last grant it signed has expired; or the next key,
published before the switch so caches hold it in time).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policyguard.errors import ConfigError


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class PublicKey:
    """One Ed25519 public key as a JWK (``x`` is the raw 32-byte key, base64url)."""

    x: str

    @property
    def kid(self) -> str:
        """RFC 7638 thumbprint: sha256 over the required members, sorted, no whitespace."""
        canonical = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": self.x}, separators=(",", ":"), sort_keys=True)
        return _b64url(hashlib.sha256(canonical.encode("ascii")).digest())

    def jwk(self) -> dict[str, str]:
        return {"kty": "OKP", "crv": "Ed25519", "x": self.x, "kid": self.kid, "alg": "EdDSA", "use": "sig"}

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        raw = base64.urlsafe_b64decode(self.x + "=" * (-len(self.x) % 4))
        key = Ed25519PublicKey.from_public_bytes(raw)
        return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _raw_public(key: Any) -> PublicKey:
    from cryptography.hazmat.primitives import serialization

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey(x=_b64url(raw))


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def signing_key(path: Path) -> tuple[bytes, PublicKey]:
    """The private PEM in ``path`` and its public key; a ConfigError naming the file otherwise."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    pem = _read(path, "grant key")
    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: the grant key must be an Ed25519 private key, got {type(key).__name__}")
    return pem, _raw_public(key.public_key())


def public_key(path: Path) -> PublicKey:
    """The Ed25519 public key in a PEM file (a private PEM is refused: it must not be handed around)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    pem = _read(path, "public key")
    if b"PRIVATE KEY" in pem:
        raise ConfigError(f"{path}: this is a private key; publish the public key only")
    try:
        key = load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{path}: a published key must be Ed25519, got {type(key).__name__}")
    return _raw_public(key)


def jwks(keys: list[PublicKey]) -> dict[str, list[dict[str, str]]]:
    """The JWK Set document, signing key first, duplicates dropped."""
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for key in keys:
        if key.kid not in seen:
            seen.add(key.kid)
            out.append(key.jwk())
    return {"keys": out}
