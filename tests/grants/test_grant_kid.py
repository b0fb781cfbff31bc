"""A grant names the key that signed it, so a verifier holding several keys (a rotation) picks the right one."""

from __future__ import annotations

import jwt

from policyguard.enforcement.grants import GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.trajectory.messages import ToolCall

CALL = ToolCall(id="c1", name="issue_refund", arguments={"amount": 5})


def test_the_kid_is_in_the_header_and_the_grant_still_verifies() -> None:
    private, public = generate_keypair()
    grant = GrantIssuer(private, kid="key-2026-12").issue(CALL, principal="p", resource=None, policy_version="v1")
    assert jwt.get_unverified_header(grant)["kid"] == "key-2026-12"
    verifier = GrantVerifier(public, nonces=SQLiteStore(), current_policy_version=lambda: "v1")
    assert verifier.verify(grant, CALL, principal="p", resource=None).call_id == "c1"


def test_without_a_kid_the_header_has_none() -> None:
    private, _ = generate_keypair()
    grant = GrantIssuer(private).issue(CALL, principal=None, resource=None, policy_version="v1")
    assert "kid" not in jwt.get_unverified_header(grant)
