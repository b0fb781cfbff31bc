"""Grants are standard EdDSA JWTs: a JOSE library verifies ours, we verify theirs, and nothing else passes.

The codec in ``policyguard.enforcement.jws`` replaces PyJWT on the hot path; PyJWT stays the
reference it is checked against, in both directions and with both Ed25519
backends (libsodium via PyNaCl, OpenSSL via cryptography).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.enforcement import jws
from policyguard.enforcement.grants import GrantError, GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.trajectory.messages import ToolCall

KEYS = generate_keypair()
OTHER = generate_keypair()
BACKENDS: list[jws.Backend] = ["pynacl", "cryptography"]
CLAIMS: dict[str, Any] = {"call_id": "c1", "tool": "issue_refund", "amount": 50, "nonce": "ab" * 16}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _token(header: dict[str, Any] | bytes, claims: dict[str, Any] | bytes = CLAIMS) -> str:
    """A token with any header and payload, correctly signed with KEYS."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    signing_input = f"{_b64(head)}.{_b64(body)}"
    return f"{signing_input}.{_b64(jws.signer(KEYS[0])(signing_input.encode()))}"


def _reason(token: str, backend: jws.Backend = "pynacl") -> str:
    with pytest.raises(jws.JWSError) as info:
        jws.decode(token, jws.verifier(KEYS[1], backend))
    return info.value.reason


def test_pynacl_is_the_backend_when_installed() -> None:
    assert jws.available_backend() == "pynacl"


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyjwt_verifies_our_tokens(backend: jws.Backend) -> None:
    token = jws.encode(CLAIMS, jws.signer(KEYS[0], backend))
    assert jwt.decode(token, KEYS[1], algorithms=["EdDSA"]) == CLAIMS
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "typ": "JWT"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_we_verify_pyjwt_tokens(backend: jws.Backend) -> None:
    token = jwt.encode(CLAIMS, KEYS[0], algorithm="EdDSA", headers={"kid": "grant-key-1"})
    assert jws.decode(token, jws.verifier(KEYS[1], backend)) == CLAIMS


def test_both_backends_sign_byte_for_byte_the_same_token() -> None:
    tokens = {jws.encode(CLAIMS, jws.signer(KEYS[0], backend)) for backend in BACKENDS}
    assert len(tokens) == 1
    assert tokens == {jwt.encode(CLAIMS, KEYS[0], algorithm="EdDSA")}


@pytest.mark.parametrize("signing", BACKENDS)
@pytest.mark.parametrize("checking", BACKENDS)
def test_a_grant_signed_by_one_backend_is_spent_by_the_other(signing: jws.Backend, checking: jws.Backend) -> None:
    issuer = GrantIssuer(KEYS[0])
    issuer._sign = jws.signer(KEYS[0], signing)
    verifier = GrantVerifier(KEYS[1], nonces=SQLiteStore(), current_policy_version=lambda: "v1")
    verifier._verify = jws.verifier(KEYS[1], checking)
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50})
    token = issuer.issue(call, principal="alice", resource="O1", policy_version="v1")
    assert verifier.verify(token, call, principal="alice", resource="O1").call_id == "c1"
    with pytest.raises(GrantError, match="replayed"):
        verifier.verify(token, call, principal="alice", resource="O1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_key_does_not_verify(backend: jws.Backend) -> None:
    token = jws.encode(CLAIMS, jws.signer(OTHER[0], backend))
    assert _reason(token, backend) == "signature"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"alg": "none", "typ": "JWT"}, "signature"),
        ({"alg": "HS256", "typ": "JWT"}, "signature"),
        ({"alg": "ES256"}, "signature"),
        ({"typ": "JWT"}, "signature"),
        ({"alg": "EdDSA", "typ": "JWT", "crit": ["exp"], "exp": 1}, "malformed"),
        ({"alg": "EdDSA", "b64": False, "crit": ["b64"]}, "malformed"),
        ({"alg": "EdDSA", "jwk": {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}}, "malformed"),
        ({"alg": "EdDSA", "x5u": "https://attacker.example/key"}, "malformed"),
        ({"alg": "EdDSA", "typ": "JWE"}, "malformed"),
        (b'["EdDSA"]', "malformed"),
        (b"not json", "malformed"),
    ],
)
def test_headers_other_than_plain_eddsa_are_refused_even_when_signed(
    header: dict[str, Any] | bytes, reason: str
) -> None:
    assert _reason(_token(header)) == reason


def test_a_kid_header_and_other_member_order_are_accepted() -> None:
    verify = jws.verifier(KEYS[1])
    assert jws.decode(_token({"typ": "JWT", "alg": "EdDSA", "kid": "k1"}), verify) == CLAIMS
    assert jws.decode(_token({"alg": "EdDSA"}), verify) == CLAIMS


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"{", b'{"a": NaN}', b"\xff\xfe", b'{"a": 1e999}'])
def test_a_signed_payload_that_is_not_a_strict_json_object_is_malformed(payload: bytes) -> None:
    assert _reason(_token({"alg": "EdDSA", "typ": "JWT"}, payload)) == "malformed"


def test_a_payload_nested_past_the_recursion_limit_is_malformed_not_a_crash() -> None:
    assert _reason(_token({"alg": "EdDSA"}, b"[" * 6000 + b"]" * 6000)) == "malformed"


def test_signed_claims_of_the_wrong_shape_are_a_malformed_grant() -> None:
    deep: Any = 1
    for _ in range(20):
        deep = {"x": deep}
    token = _token({"alg": "EdDSA"}, {"ceilings": deep})
    verifier = GrantVerifier(KEYS[1], nonces=SQLiteStore(), current_policy_version=lambda: "v1")
    with pytest.raises(GrantError) as info:
        verifier.decode(token)
    assert info.value.reason == "malformed"


def test_non_canonical_padded_or_foreign_base64_is_malformed() -> None:
    good = jws.encode(CLAIMS, jws.signer(KEYS[0]))
    header, payload, signature = good.split(".")
    alternatives = {
        "padded signature": f"{header}.{payload}.{signature}==",
        "padded header": f"{header}=.{payload}.{signature}",
        "standard alphabet": f"{header}.{payload}.{signature.replace('-', '+').replace('_', '/')}+",
        "whitespace": f"{header}.{payload}. {signature}",
        "four segments": f"{good}.{signature}",
        "two segments": f"{header}.{payload}",
        "empty signature": f"{header}.{payload}.",
        "non-ascii": f"{header}.{payload}.{signature[:-1]}é",
    }
    verify = jws.verifier(KEYS[1])
    for label, token in alternatives.items():
        with pytest.raises(jws.JWSError) as info:
            jws.decode(token, verify)
        assert info.value.reason in ("malformed", "signature"), label


def test_a_second_spelling_of_the_same_signature_bytes_is_refused() -> None:
    """Unused low bits of the last base64 character: a lenient decoder reads the same signature."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    header, payload, signature = jws.encode(CLAIMS, jws.signer(KEYS[0])).split(".")
    twin = signature[:-1] + alphabet[alphabet.index(signature[-1]) ^ 1]
    assert base64.urlsafe_b64decode(twin + "==") == base64.urlsafe_b64decode(signature + "==")
    assert _reason(f"{header}.{payload}.{twin}") == "malformed"


def test_an_overlong_token_is_refused_before_any_work() -> None:
    called: list[bytes] = []

    def verify(signature: bytes, message: bytes) -> bool:
        called.append(message)
        return True

    with pytest.raises(jws.JWSError, match="over the limit"):
        jws.decode(_token({"alg": "EdDSA"}, {"pad": "x" * 20_000}), verify)
    assert called == []


def test_nothing_in_the_payload_is_read_before_the_signature_verifies() -> None:
    token = _token({"alg": "EdDSA"}, b"{not even json")
    with pytest.raises(jws.JWSError) as info:
        jws.decode(token, jws.verifier(OTHER[1]))
    assert info.value.reason == "signature"


def test_keys_that_are_not_ed25519_are_refused() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for backend in BACKENDS:
        with pytest.raises(ValueError, match="Ed25519"):
            jws.signer(private, backend)
        with pytest.raises(ValueError, match="Ed25519"):
            jws.verifier(public, backend)


GOOD = jws.encode(CLAIMS, jws.signer(KEYS[0]))


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, len(GOOD) - 1), char=st.characters(codec="ascii"))
def test_any_one_character_changed_is_refused(position: int, char: str) -> None:
    tampered = GOOD[:position] + char + GOOD[position + 1 :]
    if tampered == GOOD:
        return
    with pytest.raises(jws.JWSError):
        jws.decode(tampered, jws.verifier(KEYS[1]))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_verifies_and_never_crashes(text: str) -> None:
    with pytest.raises(jws.JWSError):
        jws.decode(text, jws.verifier(KEYS[1]))
