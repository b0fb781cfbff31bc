"""Deterministic checks of a declared side effect's arguments, before any model runs.

A tool whose checklist entry declares ``effect: {kind: money, ...}`` moves
money. Whatever the requirements say, its amount must be a real positive
number (not a bool, a string, NaN or Infinity) within the tool's ``ceiling``;
the guard blocks any other before the gate and the verifier, and the executor
checks the same again before the effect. Above the ``approval_threshold`` the
call also needs the gate to have proven the ``approved_by`` requirement (an
approval record bound to this transaction) for this very call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from policyguard.checklist.schema import EffectSpec
from policyguard.decision import RequirementResult

EXACT_INT = 2**53
"""Larger integer amounts are not exact as floats (the ledger keeps floats): refused, not rounded."""


def amount_of(spec: EffectSpec, args: Mapping[str, Any]) -> float | str:
    """The call's amount as a float, or the reason it is not a usable amount.

    The one reading of an amount: the guard blocks on the reason before any
    stage, and the executor refuses on it again before any effect.
    """
    amount = args.get(spec.amount_arg)
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        return f"{spec.amount_arg!r} must be a number, got {amount!r}"
    if isinstance(amount, float) and not math.isfinite(amount):
        return f"{spec.amount_arg!r} must be a finite number, got {amount!r}"
    if amount <= 0:
        return f"{spec.amount_arg!r} must be positive, got {amount!r}"
    if isinstance(amount, int) and amount > EXACT_INT:
        return f"{spec.amount_arg!r} {amount} is too large to keep exactly"
    return float(amount)


def effect_problem(spec: EffectSpec, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(requirement id, message)`` when the effect's arguments break a hard limit, else None."""
    amount = amount_of(spec, args)
    if isinstance(amount, str):
        return "effect-amount", f"The amount is not valid: {amount}. Do not retry with the same arguments."
    if spec.ceiling is not None and amount > spec.ceiling:
        return (
            "effect-ceiling",
            f"The amount {amount:g} is above the most this action may move ({spec.ceiling:g}); "
            "it cannot be done. Explain this to the user.",
        )
    return None


def approval_problem(spec: EffectSpec, args: Mapping[str, Any], proven: Iterable[RequirementResult]) -> str | None:
    """Why a call above the approval threshold may not run, given what the gate proved; None when it may.

    Only the gate's own MET for the ``approved_by`` requirement counts: a
    verifier's opinion or an unverified requirement is not an approval.
    """
    amount = amount_of(spec, args)
    if spec.approval_threshold is None or isinstance(amount, str) or amount <= spec.approval_threshold:
        return None
    if spec.approved_by is not None and any(
        r.id == spec.approved_by and r.status == "MET" and r.judged_by == "gate" for r in proven
    ):
        return None
    return (
        f"An amount above {spec.approval_threshold:g} needs a person's approval, and none is proven for "
        "this call. Do not retry it; tell the user it needs approval or transfer them to a human agent."
    )
