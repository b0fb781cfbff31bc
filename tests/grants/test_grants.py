"""A grant authorises exactly one call, once, under the current policy, before it expires.

These are seed 000's regression tests: 50 authorised / 51 called, order O1 moved
to O2, the action renamed, the policy version bumped, the grant expired; plus
replay, forgery and deny-wins-over-allow.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import TYPE_CHECKING

import pytest

from policyguard.enforcement.grants import GrantError, GrantIssuer, GrantVerifier, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.trajectory.messages import ToolCall

if TYPE_CHECKING:
    from conftest import Rig


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims_of(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _refused(rig: Rig, call: ToolCall, token: str, *, principal: str = "alice", resource: str = "O1") -> str:
    with pytest.raises(GrantError) as info:
        rig.verifier.verify(token, call, principal=principal, resource=resource)
    return info.value.reason


def test_a_valid_grant_executes_the_call_once(rig: Rig) -> None:
    call = rig.call()
    result = rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1")
    assert result.executed and result.reason == "executed"
    assert result.result == {"status": "issued", "order_id": "O1", "amount": 50}
    assert len(rig.refund.calls) == 1


def test_the_grant_carries_every_binding(rig: Rig) -> None:
    call = rig.call()
    claims = rig.verifier.decode(rig.grant(call, ceilings={"amount": 50}))
    assert (claims.call_id, claims.tool, claims.principal, claims.resource) == ("c1", "issue_refund", "alice", "O1")
    assert claims.args_sha256 == call.args_sha256
    assert claims.ceilings == {"amount": 50}
    assert claims.policy_version == rig.policy()
    assert claims.exp - claims.iat == 120
    assert len(claims.nonce) == 32 and int(claims.nonce, 16) >= 0


def test_authorised_for_50_called_with_51_is_rejected(rig: Rig) -> None:
    token = rig.grant(rig.call(amount=50), ceilings={"amount": 50})
    result = rig.executor.execute(rig.call(amount=51), token, principal="alice", resource="O1")
    assert not result.executed and result.reason == "binding:args_sha256"
    assert rig.refund.calls == []


def test_a_ceiling_below_the_granted_amount_is_enforced(rig: Rig) -> None:
    call = rig.call(amount=51)
    assert _refused(rig, call, rig.grant(call, ceilings={"amount": 50})) == "binding:ceilings"
    missing = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1"})
    assert _refused(rig, missing, rig.grant(missing, ceilings={"amount": 50})) == "binding:ceilings"


def test_authorisation_moved_from_order_o1_to_o2_is_rejected(rig: Rig) -> None:
    token = rig.grant(rig.call(order="O1"))
    assert _refused(rig, rig.call(order="O2"), token, resource="O1") == "binding:args_sha256"
    assert _refused(rig, rig.call(order="O1"), token, resource="O2") == "binding:resource"
    result = rig.executor.execute(rig.call(order="O2"), token, principal="alice", resource="O2")
    assert not result.executed and rig.refund.calls == []


def test_renamed_tool_other_call_id_or_other_principal_is_rejected(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    renamed = ToolCall(id=call.id, name="issue_refund_v2", arguments=call.arguments)
    assert _refused(rig, renamed, token) == "binding:tool"
    assert _refused(rig, rig.call("c2", key="key-c1"), token) == "binding:call_id"
    assert _refused(rig, call, token, principal="mallory") == "binding:principal"


def test_a_bumped_policy_version_revokes_outstanding_grants(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    rig.policy.version = "sha256:" + "2" * 64
    result = rig.executor.execute(call, token, principal="alice", resource="O1")
    assert not result.executed and result.reason == "policy_version"
    assert rig.refund.calls == []


def test_an_expired_grant_is_rejected(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    rig.clock.now += 120
    assert _refused(rig, call, token) == "expired"
    rig.clock.now -= 1
    assert rig.verifier.verify(token, call, principal="alice", resource="O1").call_id == "c1"


def test_leeway_extends_expiry(keys: tuple[bytes, bytes]) -> None:
    private_pem, public_pem = keys
    now = [1000.0]
    issuer = GrantIssuer(private_pem, ttl_s=10, clock=lambda: now[0])
    verifier = GrantVerifier(
        public_pem, nonces=SQLiteStore(), current_policy_version=lambda: "v", clock=lambda: now[0], leeway_s=5
    )
    call = ToolCall(id="c1", name="get_order", arguments={"order_id": "O1"})
    token = issuer.issue(call, principal=None, resource=None, policy_version="v")
    now[0] += 14
    assert verifier.verify(token, call, principal=None, resource=None).exp == 1010


def test_a_replayed_grant_is_rejected(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    assert rig.executor.execute(call, token, principal="alice", resource="O1").executed
    again = rig.executor.execute(call, token, principal="alice", resource="O1")
    assert not again.executed and again.reason == "replayed"
    assert len(rig.refund.calls) == 1


def test_a_mismatched_call_does_not_burn_the_grant(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    assert not rig.executor.execute(rig.call(amount=51), token, principal="alice", resource="O1").executed
    assert rig.executor.execute(call, token, principal="alice", resource="O1").executed


def test_a_grant_signed_with_another_key_is_rejected(rig: Rig) -> None:
    other_private, _ = generate_keypair()
    call = rig.call()
    forged = GrantIssuer(other_private, clock=rig.clock).issue(
        call, principal="alice", resource="O1", policy_version=rig.policy()
    )
    assert _refused(rig, call, forged) == "signature"


def test_a_tampered_payload_is_rejected(rig: Rig) -> None:
    call = rig.call(amount=500)
    header, _, signature = rig.grant(rig.call(amount=50)).split(".")
    claims = _claims_of(rig.grant(rig.call(amount=50)))
    claims["args_sha256"] = call.args_sha256
    tampered = ".".join([header, _b64(json.dumps(claims).encode()), signature])
    assert _refused(rig, call, tampered) == "signature"


def test_alg_none_is_rejected(rig: Rig) -> None:
    call = rig.call()
    claims = _claims_of(rig.grant(call))
    unsigned = _b64(b'{"alg":"none","typ":"JWT"}') + "." + _b64(json.dumps(claims).encode()) + "."
    assert _refused(rig, call, unsigned) == "signature"
    assert rig.refund.calls == []


def test_hs256_with_the_public_key_as_secret_is_rejected(rig: Rig, keys: tuple[bytes, bytes]) -> None:
    call = rig.call()
    claims = _claims_of(rig.grant(call))
    signing_input = _b64(b'{"alg":"HS256","typ":"JWT"}') + "." + _b64(json.dumps(claims).encode())
    mac = hmac.new(keys[1], signing_input.encode(), hashlib.sha256).digest()
    assert _refused(rig, call, signing_input + "." + _b64(mac)) == "signature"


@pytest.mark.parametrize("token", ["", "not-a-jwt", "a.b.c"])
def test_garbage_is_malformed(rig: Rig, token: str) -> None:
    assert _refused(rig, rig.call(), token) == "malformed"


def test_a_deny_wins_over_a_valid_grant(rig: Rig) -> None:
    call = rig.call()
    token = rig.grant(call)
    rig.store.deny(call.id)
    result = rig.executor.execute(call, token, principal="alice", resource="O1")
    assert not result.executed and result.reason == "denied"
    assert rig.refund.calls == [] and rig.store.entries() == []


def test_a_deny_for_another_call_does_not_block_this_one(rig: Rig) -> None:
    rig.store.deny("c9")
    call = rig.call()
    assert rig.executor.execute(call, rig.grant(call), principal="alice", resource="O1").executed


def test_importing_grants_store_and_executor_does_not_import_jwt() -> None:
    import subprocess
    import sys

    code = (
        "import sys, policyguard.enforcement.grants, policyguard.enforcement.store, policyguard.enforcement.executor, policyguard.enforcement.jws\n"
        "print(sorted(m for m in ('jwt', 'nacl', 'cryptography') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_grant_is_issued_for_arguments_without_a_canonical_hash(keys: tuple[bytes, bytes]) -> None:
    """A lone surrogate has no canonical hash: the issuer refuses with GrantError, not a raw UnicodeEncodeError."""
    from policyguard.enforcement.grants import GrantError, GrantIssuer
    from policyguard.trajectory.messages import ToolCall

    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "idempotency_key": "k\ud800"})
    with pytest.raises(GrantError, match="no canonical hash"):
        GrantIssuer(keys[0]).issue(call, principal="alice", resource="O1", policy_version="v1")
