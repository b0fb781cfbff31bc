"""Call-bound grants: the executor's proof that the policy said *allow* to this exact call.

A grant is a short-lived JWT signed with Ed25519 (``alg`` EdDSA) by the
component that decided *allow*. It binds the call id, tool, sha256 of the
canonical arguments, principal, resource, numeric ceilings, policy version,
expiry and a single-use nonce. A model cannot forge one, widen it (50 -> 51
USD, order O1 -> O2, another tool), keep it across a policy change, or spend it
twice (the articles "Why Agents Refund When Policy Says No: The Retrieval-Enforcement Gap"
and, for INV-1, "Make Tool-Boundary Authorization an Invariant Before You Give Agents More Tools").

Verification order, and why: signature and claim shape first; then the checks
that need no shared state (issuer, policy version, expiry, every binding); only
then the nonce is consumed, so a mismatched or stale call does not burn a grant
it could never use; and last the deny record for the call is read, after the
nonce is spent, so a deny recorded at any time before consumption wins. The
deny record is read under the call's identity
(:class:`~policyguard.enforcement.scoped.CallIdentity`): the grant's session,
call id, tool, argument hash and ``place`` claim. A grant without a ``place``
(older grants, or an issuer that does not know it) is read as a call with no
known place, the stricter case: any deny of its identity, or of its bare id,
refuses it.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from policyguard.errors import PolicyGuardError
from policyguard.trajectory.messages import ToolCall

from . import jws
from .purge import NoncePurger
from .scoped import CallIdentity, any_denied
from .store import NonceStore

ALGORITHM = jws.ALGORITHM


class GrantError(PolicyGuardError):
    """A grant was refused. ``reason`` is one of ``signature``, ``malformed``,
    ``expired``, ``policy_version``, ``binding:<field>``, ``replayed``, ``denied``."""

    def __init__(self, reason: str, message: str = "") -> None:
        self.reason = reason
        super().__init__(f"{reason}: {message}" if message else reason)


class GrantClaims(BaseModel):
    """What a grant asserts. Every field is checked against the actual call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call_id: str
    principal: str | None
    tool: str
    resource: str | None
    args_sha256: str
    ceilings: dict[str, float]
    policy_version: str
    iat: int
    exp: int
    nonce: str
    iss: str
    approval_id: str | None = None
    session_id: str | None = None
    place: str = ""

    def identity(self, call_id: str) -> CallIdentity:
        """The identity of the call this grant is for, as the deny store keys it (``call_id``: the call's id)."""
        return CallIdentity(self.session_id, call_id, self.tool, self.args_sha256, self.place)


def generate_keypair() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair as (private PEM, public PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


class GrantIssuer:
    """Signs grants. Only the trusted policy component holds this key."""

    def __init__(
        self,
        private_key_pem: bytes,
        *,
        ttl_s: int = 120,
        issuer: str = "policyguard",
        clock: Callable[[], float] = time.time,
        kid: str | None = None,
    ) -> None:
        """``kid`` goes into each grant's JOSE header, so a verifier holding a
        JWKS with several keys (a rotation) picks the one that signed it."""
        self._sign = jws.signer(private_key_pem)
        self.ttl_s = ttl_s
        self.issuer = issuer
        self.kid = kid
        self._clock = clock

    def issue(
        self,
        call: ToolCall,
        *,
        principal: str | None,
        resource: str | None,
        policy_version: str,
        ceilings: dict[str, float] | None = None,
        expires_at: float | None = None,
        approval_id: str | None = None,
        args_sha256: str | None = None,
        session_id: str | None = None,
        place: str = "",
    ) -> str:
        """A signed grant for exactly ``call``, valid for ``ttl_s`` seconds (never past ``expires_at``), usable once.

        ``approval_id`` names the person's approval the grant was issued on (an approval grant).

        ``args_sha256``: the call's argument hash when the caller already has it
        (it must be ``call.args_sha256``; hashing once per call is the point).

        ``session_id`` binds the grant to the conversation its call belongs to:
        the executor reads the deny record under the session and the call id.

        ``place``: which issuance of the call the guard allowed
        (:func:`policyguard.guard.calls.call_place`); the executor reads the deny
        record of the call at that place. ``""``: unknown, the stricter case.
        """
        now = int(self._clock())
        exp = now + int(self.ttl_s)
        if expires_at is not None:
            exp = min(exp, int(expires_at))
        claims = GrantClaims(
            call_id=call.id,
            principal=principal,
            tool=call.name,
            resource=resource,
            args_sha256=_args_sha256(call) if args_sha256 is None else args_sha256,
            ceilings=dict(ceilings or {}),
            policy_version=policy_version,
            iat=now,
            exp=exp,
            nonce=secrets.token_hex(16),
            iss=self.issuer,
            approval_id=approval_id,
            session_id=session_id,
            place=place,
        )
        payload = claims.model_dump()
        if approval_id is None:
            del payload["approval_id"]  # a plain gate grant keeps its original claim set
        if session_id is None:
            del payload["session_id"]
        if not place:
            del payload["place"]
        return jws.encode(payload, self._sign, kid=self.kid)


class GrantVerifier:
    """Checks a grant against the actual call and spends it. Refuses by raising GrantError."""

    def __init__(
        self,
        public_key_pem: bytes,
        *,
        nonces: NonceStore,
        current_policy_version: Callable[[], str],
        clock: Callable[[], float] = time.time,
        leeway_s: int = 0,
        issuer: str = "policyguard",
        purger: NoncePurger | None = None,
    ) -> None:
        """``purger`` forgets expired nonces now and then (default: a
        :class:`~policyguard.enforcement.purge.NoncePurger`
        on ``nonces`` with this clock)."""
        self._verify = jws.verifier(public_key_pem)
        self.nonces = nonces
        self.current_policy_version = current_policy_version
        self.leeway_s = leeway_s
        self.issuer = issuer
        self._clock = clock
        self.purger = purger if purger is not None else NoncePurger(nonces, clock=clock)

    def decode(self, token: str) -> GrantClaims:
        """Check the signature (EdDSA only) and the claim shape; nothing else."""
        try:
            payload = jws.decode(token, self._verify)
        except jws.JWSError as exc:
            raise GrantError(exc.reason, str(exc)) from exc
        try:
            return GrantClaims.model_validate(payload)
        except ValidationError as exc:
            raise GrantError("malformed", str(exc.errors()[0]["msg"])) from exc

    def check(
        self,
        token: str,
        call: ToolCall,
        *,
        principal: str | None,
        resource: str | None,
        args_sha256: str | None = None,
    ) -> GrantClaims:
        """Everything :meth:`verify` checks except the shared state: the grant is not spent.

        The caller must then spend the nonce and read the deny record, in this
        order, before the call may run (:meth:`spend`, or a store's combined
        :class:`policyguard.enforcement.store.SpendAndClaim`). ``args_sha256``: the call's
        argument hash when the caller already computed it from ``call``.
        """
        if not isinstance(token, str) or not token:
            raise GrantError("malformed", "no grant")
        claims = self.decode(token)
        if claims.iss != self.issuer:
            raise GrantError("malformed", f"issuer {claims.iss!r} is not {self.issuer!r}")
        current = self.current_policy_version()
        if claims.policy_version != current:
            raise GrantError("policy_version", f"grant is for {claims.policy_version}, policy is now {current}")
        now = self._clock()
        if now >= claims.exp + self.leeway_s:
            raise GrantError("expired", f"expired at {claims.exp}, now {now:.0f}")
        sha = call.args_sha256 if args_sha256 is None else args_sha256
        _check_bindings(claims, call, sha, principal=principal, resource=resource)
        return claims

    def nonce_expiry(self, claims: GrantClaims) -> float:
        """Until when a spent nonce must be remembered: after that the grant fails as expired anyway."""
        return float(claims.exp + self.leeway_s)

    def spend(self, claims: GrantClaims, call_id: str) -> None:
        """Consume the grant's nonce, then read the deny record of the call; GrantError if either refuses."""
        if not self.nonces.consume(claims.nonce, self.nonce_expiry(claims)):
            raise self.refusal("replayed", claims, call_id)
        self.purger.tick()
        if any_denied(self.nonces, claims.identity(call_id).deny_lookups()):
            raise self.refusal("denied", claims, call_id)

    @staticmethod
    def refusal(outcome: Literal["replayed", "denied"], claims: GrantClaims, call_id: str) -> GrantError:
        """The error for a grant whose nonce was already spent, or whose call has a deny recorded."""
        if outcome == "replayed":
            return GrantError("replayed", f"grant nonce {claims.nonce} was already used")
        return GrantError("denied", f"a deny is recorded for call {call_id}")

    def verify(
        self,
        token: str,
        call: ToolCall,
        *,
        principal: str | None,
        resource: str | None,
        args_sha256: str | None = None,
    ) -> GrantClaims:
        """Return the grant's claims if it authorises exactly this call now; consume it.

        Raises :class:`GrantError`; a failing nonce store raises
        :class:`policyguard.enforcement.store.LedgerUnavailable` (inconclusive, never allow).
        """
        claims = self.check(token, call, principal=principal, resource=resource, args_sha256=args_sha256)
        self.spend(claims, call.id)
        return claims


def _check_bindings(
    claims: GrantClaims, call: ToolCall, sha: str, *, principal: str | None, resource: str | None
) -> None:
    expected: dict[str, Any] = {
        "call_id": call.id,
        "tool": call.name,
        "principal": principal,
        "resource": resource,
        "args_sha256": sha,
    }
    for field, actual in expected.items():
        granted = getattr(claims, field)
        if granted != actual:
            raise GrantError(f"binding:{field}", f"granted {granted!r}, call has {actual!r}")
    for name, ceiling in claims.ceilings.items():
        value = call.arguments.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise GrantError("binding:ceilings", f"argument {name!r} is {value!r}, not a number under a ceiling")
        if value > ceiling:
            raise GrantError("binding:ceilings", f"argument {name!r} = {value:g} exceeds the ceiling {ceiling:g}")


def _args_sha256(call: ToolCall) -> str:
    """The call's argument hash; arguments with no canonical form (a lone surrogate, NaN) get no grant."""
    sha = call.args_sha256_or_none()
    if sha is None:
        raise GrantError("malformed", f"the arguments of call {call.id} have no canonical hash; no grant is issued")
    return sha
