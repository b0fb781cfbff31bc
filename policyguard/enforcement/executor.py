"""The verdict-gated executor: a tool runs only with a valid grant for exactly this call.

Refusal is the default state (INV-1, from the article
"Make Tool-Boundary Authorization an Invariant Before You Give Agents More Tools"). ``execute`` returns an
:class:`ExecutionResult`; it never raises for a refusal. A call reaches the tool
only when:

1. the tool is registered here and its arguments are within the limits of
   :mod:`policyguard.trajectory.limits` (finite numbers, bounded depth and size);
2. for a money effect, the amount is a positive, finite, exact number (not a
   bool, not a string), the transaction and idempotency key are present, the
   amount is within the tool's ceiling, and an amount above the tool's
   ``approval_threshold`` is covered by an approval (see
   :mod:`policyguard.enforcement.approvalcheck`; no approval check configured: refused,
   ``needs_approval``);
3. the grant verifies (signature, bindings, policy version, expiry, unused
   nonce, no deny recorded for the call: deny wins, keyed by the call's identity
   in :mod:`.scoped`);
4. for a money effect, the idempotency key is claimed in the ledger within the
   captured amount (with the nonce and the deny record in the same transaction
   when the store implements :class:`~policyguard.enforcement.store.SpendAndClaim`). A
   committed key returns the recorded result (no second effect); a pending key
   (an earlier attempt's outcome is unknown) is refused until someone looks it
   up by key.

Checks 1-2 come before the grant is spent so a malformed call does not burn it.
A store failure is *inconclusive*: the tool is not called. A tool that raises
leaves its money claim pending, because whether the money moved is unknown.

Which tools move money is configuration, checked at construction: pass the
``checklist`` (its tools' ``effect`` entries) or declare ``effects`` explicitly
(``effects={}`` says that no registered tool moves money). With neither, with a
registered tool the checklist does not name, with a declared effect for a tool
that is not registered, or with a money tool and no ledger, the executor
refuses to be built (:class:`~policyguard.errors.ConfigError` naming the tool).

Trace events: ``execute`` right before the tool runs and ``effect`` after it
returned. A refusal emits neither; the caller records the deny.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from policyguard.audit.trace import Trace
from policyguard.checklist.schema import Checklist, EffectSpec
from policyguard.errors import ConfigError
from policyguard.gate.effects import amount_of
from policyguard.trajectory.limits import checked_copy
from policyguard.trajectory.messages import ToolCall

from .approvalcheck import ApprovalCheck, MoneyEffect
from .grants import GrantClaims, GrantError, GrantVerifier
from .store import EffectClaim, EffectRequest, Ledger, LedgerUnavailable, SpendAndClaim

PENDING_REASON = "effect_pending: look up by key before retrying"


class ExecutionResult(BaseModel):
    """What happened to one call. ``reason`` says why it was refused, or how it ran.

    ``executed`` is True only when the tool was invoked by *this* call. A retry
    answered from the ledger has ``executed=False``, ``replayed_from_ledger=True``
    and the recorded ``result``: it succeeded without a second effect.
    """

    model_config = ConfigDict(extra="forbid")

    executed: bool
    result: Any = None
    error: str | None = None
    reason: str
    replayed_from_ledger: bool = False


def _refuse(reason: str, error: str | None = None) -> ExecutionResult:
    return ExecutionResult(executed=False, reason=reason, error=error or reason)


class GuardedExecutor:
    """Runs registered tools, each call only under a verified, unspent grant."""

    def __init__(
        self,
        tools: dict[str, Callable[..., Any]],
        *,
        verifier: GrantVerifier,
        ledger: Ledger | None,
        checklist: Checklist | None = None,
        trace: Trace | None = None,
        effects: Mapping[str, EffectSpec] | None = None,
        approvals: ApprovalCheck | None = None,
    ) -> None:
        self.tools = dict(tools)
        self.verifier = verifier
        self.ledger = ledger
        self.checklist = checklist
        self.trace = trace
        self.approvals = approvals
        if checklist is None and effects is None:
            raise ConfigError(
                "GuardedExecutor needs checklist= or effects= to know which tools move money "
                f"(effects={{}} declares that none of {sorted(self.tools)} does)"
            )
        if checklist is not None and effects is not None:
            raise ConfigError("pass checklist= or effects= to GuardedExecutor, not both")
        self._declared = dict(effects) if effects is not None else None
        unknown = sorted(set(self._declared or {}) - set(self.tools))
        if unknown:
            raise ConfigError(f"effects= declares {unknown[0]!r}, which is not a registered tool")
        self.effects: dict[str, EffectSpec | None] = {name: self._classify(name) for name in self.tools}
        self._capable_of: tuple[object, bool] = (None, False)

    def _classify(self, name: str) -> EffectSpec | None:
        """The tool's money effect, or None; ConfigError when unknown, malformed or without a ledger."""
        if self._declared is not None:
            effect = self._declared.get(name)
        else:
            assert self.checklist is not None
            spec = self.checklist.tool_spec(name)
            if spec is None:
                raise ConfigError(
                    f"tool {name!r} is registered with the executor but the checklist does not name it, "
                    "so whether it moves money is unknown"
                )
            effect = spec.effect
        if effect is None:
            return None
        if self.ledger is None:
            raise ConfigError(f"tool {name!r} moves money and the executor has no ledger: pass ledger=")
        for field in ("ceiling", "approval_threshold"):
            value = getattr(effect, field)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"tool {name!r}: effect.{field} must be a positive finite number, got {value!r}")
        return effect

    def execute(
        self, call: ToolCall, grant: str | None, *, principal: str | None, resource: str | None
    ) -> ExecutionResult:
        """Run ``call`` if ``grant`` authorises exactly it; otherwise refuse without side effects."""
        tool = self.tools.get(call.name)
        if tool is None:
            return _refuse("unknown_tool", f"no tool {call.name!r} is registered with the executor")
        # Verify and run a private copy: arguments changed elsewhere after the grant check
        # must not reach the tool (INV-1's argument-mutation fault).
        arguments, problem = checked_copy(call.arguments)
        if arguments is None:
            return _refuse("bad_arguments", f"{call.name}: {problem}")
        call = ToolCall(id=call.id, name=call.name, arguments=arguments)
        if call.name not in self.effects:  # registered after construction: same rules, refused if unclear
            try:
                self.effects[call.name] = self._classify(call.name)
            except ConfigError as exc:
                return _refuse("unknown_tool", str(exc))
        spec = self.effects[call.name]
        money: MoneyEffect | None = None
        if spec is not None:
            parsed = _money_args(spec, call, resource)
            if isinstance(parsed, ExecutionResult):
                return parsed
            money = parsed
            refusal = self._approval_refusal(spec, call, money)
            if refusal is not None:
                return refusal
        if grant is None:
            return _refuse("no_grant", "no grant: the call was not authorised")
        try:
            sha = call.args_sha256  # once per call, of the private copy: the grant must bind what runs
        except (ValueError, TypeError, RecursionError) as exc:
            return _refuse("bad_arguments", f"{call.name}: the arguments have no canonical JSON ({exc})")
        try:
            claims = self.verifier.check(grant, call, principal=principal, resource=resource, args_sha256=sha)
        except GrantError as exc:
            return _refuse(exc.reason, str(exc))
        except LedgerUnavailable as exc:
            return _refuse("inconclusive", str(exc))
        effect = None
        if money is not None:
            effect = EffectRequest(
                idempotency_key=money.idempotency_key,
                tool=call.name,
                transaction_id=money.transaction_id,
                amount=money.amount,
                currency=money.currency,
                args_sha256=sha,
                enforce_captured=True,
            )
        try:
            claim = self._spend_and_claim(claims, call.id, effect)
        except GrantError as exc:
            return _refuse(exc.reason, str(exc))
        except LedgerUnavailable as exc:
            return _refuse("inconclusive", str(exc))
        if money is None:
            return self._run(tool, call, sha, None, claims.session_id, claims.place)
        if claim is None:  # a store that spent the grant but claimed nothing: the effect is not recorded
            return _refuse("inconclusive", "the store returned no ledger claim for a money effect")
        if claim.refusal is not None:
            return _refuse("exceeds_captured", claim.refusal)
        record = claim.record
        assert record is not None
        if not claim.created:
            if record.tool != call.name or record.args_sha256 != sha:
                return _refuse("idempotency_conflict", "the idempotency key was used for a different call")
            if record.status == "pending":
                return _refuse(PENDING_REASON)
            result = json.loads(record.result_json) if record.result_json is not None else None
            return ExecutionResult(
                executed=False, result=result, reason="replayed_from_ledger", replayed_from_ledger=True
            )
        return self._run(tool, call, sha, money, claims.session_id, claims.place)

    def _spend_and_claim(self, claims: GrantClaims, call_id: str, effect: EffectRequest | None) -> EffectClaim | None:
        """Spend the grant, read the deny record, claim the effect: one transaction when the store can.

        Raises GrantError (replayed, denied) or LedgerUnavailable; returns the
        claim, or None when no effect was asked for.
        """
        nonces = self.verifier.nonces
        if nonces is not self._capable_of[0]:  # a runtime Protocol check costs microseconds: once per store
            self._capable_of = (nonces, isinstance(nonces, SpendAndClaim))
        if self._capable_of[1] and (effect is None or nonces is self.ledger):
            spent = cast(SpendAndClaim, nonces).spend_and_claim(
                claims.nonce, self.verifier.nonce_expiry(claims), claims.identity(call_id).deny_lookups(), effect
            )
            if spent.outcome != "replayed":
                self.verifier.purger.tick()  # a nonce was spent: now and then, forget the expired ones
            if spent.outcome != "spent":
                raise self.verifier.refusal(spent.outcome, claims, call_id)
            return spent.claim
        self.verifier.spend(claims, call_id)
        if effect is None:
            return None
        assert self.ledger is not None
        return self.ledger.begin_effect(
            effect.idempotency_key,
            tool=effect.tool,
            transaction_id=effect.transaction_id,
            amount=effect.amount,
            currency=effect.currency,
            args_sha256=effect.args_sha256,
            enforce_captured=effect.enforce_captured,
        )

    def _approval_refusal(self, spec: EffectSpec, call: ToolCall, money: MoneyEffect) -> ExecutionResult | None:
        threshold = spec.approval_threshold
        if threshold is None or money.amount <= threshold:
            return None
        above = f"{money.amount:g} is above {call.name}'s approval threshold {threshold:g}"
        if self.approvals is None:
            return _refuse(
                "needs_approval",
                f"{above} and this executor has no approval check (approvals= is not set), so the call "
                "needs a human approval it cannot verify",
            )
        try:
            problem = self.approvals(call, money)
        except Exception as exc:  # an approval check must not raise; if it does, nothing is approved
            problem = f"the approval check failed ({type(exc).__name__}: {exc})"
        return None if problem is None else _refuse("needs_approval", f"{above}: {problem}")

    def _run(
        self,
        tool: Callable[..., Any],
        call: ToolCall,
        sha: str,
        money: MoneyEffect | None,
        session_id: str | None,
        place: str = "",
    ) -> ExecutionResult:
        """Run the tool; the trace's execute and effect events name the call's session and place, as its
        allow did."""
        session: dict[str, Any] = {} if session_id is None else {"session_id": session_id}
        if place:
            session["place"] = place
        if self.trace is not None:
            self.trace.emit("execute", call_id=call.id, tool=call.name, args_sha256=sha, **session)
        try:
            result = tool(**call.arguments)
        except Exception as exc:  # the tool's own failure goes back as its error result
            reason = "tool_error" if money is None else "tool_error: effect left pending"
            return ExecutionResult(executed=True, error=f"{type(exc).__name__}: {exc}", reason=reason)
        if money is not None:
            assert self.ledger is not None
            try:
                self.ledger.complete_effect(money.idempotency_key, json.dumps(result, default=str))
            except LedgerUnavailable as exc:
                return ExecutionResult(executed=True, result=result, error=str(exc), reason="inconclusive")
        if self.trace is not None:
            self.trace.emit(
                "effect",
                call_id=call.id,
                tool=call.name,
                args_sha256=sha,
                idempotency_key=money.idempotency_key if money else None,
                amount=money.amount if money else None,
                transaction_id=money.transaction_id if money else None,
                **session,
            )
        return ExecutionResult(executed=True, result=result, reason="executed")


def _money_args(spec: EffectSpec, call: ToolCall, resource: str | None) -> MoneyEffect | ExecutionResult:
    args = call.arguments
    key = args.get(spec.idempotency_arg)
    if not isinstance(key, str) or not key:
        return _refuse("effect_args", f"{call.name} needs a non-empty {spec.idempotency_arg!r} argument")
    amount = amount_of(spec, args)
    if isinstance(amount, str):
        return _refuse("effect_args", amount)
    if spec.ceiling is not None and amount > spec.ceiling:
        return _refuse("exceeds_ceiling", f"{amount:g} exceeds the tool's ceiling {spec.ceiling:g}")
    transaction = args.get(spec.transaction_arg)
    if isinstance(transaction, bool) or not isinstance(transaction, (str, int)) or transaction == "":
        return _refuse("effect_args", f"{call.name} needs a {spec.transaction_arg!r} argument")
    if spec.resource_arg is not None and args.get(spec.resource_arg) != resource:
        return _refuse("binding:resource", f"{spec.resource_arg!r} is not the authorised resource {resource!r}")
    currency = args.get(spec.currency_arg) if spec.currency_arg else None
    if spec.currency_arg is not None and not isinstance(currency, str):
        return _refuse("effect_args", f"{call.name} needs a {spec.currency_arg!r} argument")
    return MoneyEffect(
        tool=call.name, amount=amount, currency=currency, transaction_id=str(transaction), idempotency_key=key
    )
