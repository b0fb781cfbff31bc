"""Compact EdDSA JSON Web Signatures (RFC 7515 + RFC 8037), the encoding of call-bound grants.

A grant is a standard JWT: ``base64url(header) . base64url(payload) .
base64url(Ed25519 signature)`` with the header ``{"alg":"EdDSA","typ":"JWT"}``,
so any JOSE library (PyJWT, jose, jsonwebtoken, ...) verifies it with the public
key. This module encodes and checks exactly that shape, strictly and cheaply: a
generic JWT library costs about as much again as the signature itself.

The Ed25519 arithmetic comes from libsodium (PyNaCl, the ``fast`` extra) when it
is installed and from OpenSSL (``cryptography``) otherwise. Ed25519 signatures
are deterministic, so both backends produce the same token byte for byte; only
the speed differs (libsodium verifies about 2x faster here).

What the decoder refuses (``JWSError``; ``reason`` ``malformed`` or ``signature``):
anything but three base64url segments without padding in canonical form; a
header that is not a JSON object, names an ``alg`` other than ``EdDSA``, a
``typ`` other than ``JWT``, or any member besides ``alg``, ``typ`` and ``kid``
(so no ``crit``, ``b64``, ``jwk`` or ``x5u`` extension can change what is
verified); a signature that is not 64 bytes or does not verify; a payload
that is not a strict JSON object. Nothing is parsed from the payload before
the signature has verified.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from typing import Any, Literal

from policyguard.errors import PolicyGuardError
from policyguard.trajectory import strictjson

ALGORITHM = "EdDSA"
MAX_TOKEN_CHARS = 16_384
"""A grant is a few hundred characters; a longer token is refused before any work."""

Backend = Literal["pynacl", "cryptography"]

_HEADER = {"alg": ALGORITHM, "typ": "JWT"}
_HEADER_SEGMENT = base64.urlsafe_b64encode(json.dumps(_HEADER, separators=(",", ":")).encode()).rstrip(b"=")
_HEADER_MEMBERS = frozenset({"alg", "typ", "kid"})
_SEGMENT = re.compile(rb"[A-Za-z0-9_-]*")


class JWSError(PolicyGuardError):
    """A token was refused: ``reason`` is ``malformed`` (not our shape) or ``signature`` (not our signer)."""

    def __init__(self, reason: Literal["malformed", "signature"], message: str) -> None:
        self.reason = reason
        super().__init__(message)


def available_backend() -> Backend:
    """``pynacl`` when PyNaCl imports, else ``cryptography``: the backend used when none is named."""
    try:
        import nacl.bindings  # noqa: F401
    except ImportError:
        return "cryptography"
    return "pynacl"


def signer(private_key_pem: bytes, backend: Backend | None = None) -> Callable[[bytes], bytes]:
    """``sign(message) -> 64-byte signature`` for an Ed25519 private key in PEM; ValueError for any other key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(private_key_pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the grant key must be an Ed25519 private key")
    if (backend or available_backend()) == "cryptography":
        return key.sign
    from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

    _, secret = crypto_sign_seed_keypair(key.private_bytes_raw())

    def sign(message: bytes) -> bytes:
        return bytes(crypto_sign(message, secret)[:64])

    return sign


def verifier(public_key_pem: bytes, backend: Backend | None = None) -> Callable[[bytes, bytes], bool]:
    """``verify(signature, message) -> bool`` for an Ed25519 public key in PEM; ValueError for any other key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key(public_key_pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the grant key must be an Ed25519 public key")
    if (backend or available_backend()) == "cryptography":
        from cryptography.exceptions import InvalidSignature

        def verify_openssl(signature: bytes, message: bytes) -> bool:
            try:
                key.verify(signature, message)
            except InvalidSignature:
                return False
            return True

        return verify_openssl
    from nacl.bindings import crypto_sign_open
    from nacl.exceptions import BadSignatureError

    raw = key.public_bytes_raw()

    def verify_sodium(signature: bytes, message: bytes) -> bool:
        try:
            crypto_sign_open(signature + message, raw)
        except BadSignatureError:
            return False
        return True

    return verify_sodium


def encode(claims: dict[str, Any], sign: Callable[[bytes], bytes], *, kid: str | None = None) -> str:
    """The compact JWS of ``claims`` (a JSON object) signed with ``sign``; ``kid`` names the key in the header."""
    payload = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":"), allow_nan=False).encode())
    header = _HEADER_SEGMENT
    if kid is not None:
        header = base64.urlsafe_b64encode(json.dumps({**_HEADER, "kid": kid}, separators=(",", ":")).encode()).rstrip(
            b"="
        )
    signing_input = header + b"." + payload.rstrip(b"=")
    signature = base64.urlsafe_b64encode(sign(signing_input)).rstrip(b"=")
    return (signing_input + b"." + signature).decode("ascii")


def decode(token: str, verify: Callable[[bytes, bytes], bool]) -> dict[str, Any]:
    """The claims of ``token`` if its EdDSA signature verifies; :class:`JWSError` otherwise."""
    if not isinstance(token, str) or not token:
        raise JWSError("malformed", "no token")
    if len(token) > MAX_TOKEN_CHARS:
        raise JWSError("malformed", f"token of {len(token):,} characters is over the limit of {MAX_TOKEN_CHARS:,}")
    try:
        raw = token.encode("ascii")
    except UnicodeEncodeError:
        raise JWSError("malformed", "token is not ASCII") from None
    parts = raw.split(b".")
    if len(parts) != 3:
        raise JWSError("malformed", f"a compact JWS has 3 segments, this token has {len(parts)}")
    header_segment, payload_segment, signature_segment = parts
    if header_segment != _HEADER_SEGMENT:
        _check_header(_json_object(_segment(header_segment, "header"), "header"))
    signature = _segment(signature_segment, "signature")
    payload = _segment(payload_segment, "payload")
    if len(signature) != 64:
        raise JWSError("signature", f"an Ed25519 signature is 64 bytes, this one is {len(signature)}")
    if not verify(signature, header_segment + b"." + payload_segment):
        raise JWSError("signature", "the signature does not verify with the grant key")
    return _json_object(payload, "payload")


def _segment(segment: bytes, name: str) -> bytes:
    """Strict base64url: the alphabet only, no padding, and the one canonical encoding of its bytes."""
    if _SEGMENT.fullmatch(segment) is None or len(segment) % 4 == 1:
        raise JWSError("malformed", f"the {name} is not base64url")
    try:
        data = base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise JWSError("malformed", f"the {name} is not base64url") from None
    if base64.urlsafe_b64encode(data).rstrip(b"=") != segment:
        raise JWSError("malformed", f"the {name} is not canonical base64url")
    return data


def _json_object(data: bytes, name: str) -> dict[str, Any]:
    """Strict JSON: no NaN or Infinity; size bounded by MAX_TOKEN_CHARS, nesting by the recursion limit."""
    try:
        value = strictjson.loads(data.decode("utf-8"), parse_constant=_not_a_number, parse_float=_finite)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise JWSError("malformed", f"the {name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise JWSError("malformed", f"the {name} is not a JSON object")
    return value


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is not a finite number")
    return number


def _check_header(header: dict[str, Any]) -> None:
    extra = sorted(set(header) - _HEADER_MEMBERS)
    if extra:
        raise JWSError("malformed", f"header member {extra[0]!r} is not accepted")
    if header.get("alg") != ALGORITHM:
        raise JWSError("signature", f"algorithm {header.get('alg')!r} is not {ALGORITHM}")
    if header.get("typ", "JWT") != "JWT":
        raise JWSError("malformed", f"typ {header.get('typ')!r} is not JWT")
