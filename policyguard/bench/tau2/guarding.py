"""The experiment configurations: which guard (if any) sits in front of the tools.

=====================  =====================================================
config                 what checks a mutating call
=====================  =====================================================
``baseline``           nothing (the agent alone)
``args_only``          the gate, but only checks over ``args`` (no facts, no
                       principal, no dialogue) - a ToolGuard-like argument guard
``gate_only``          the full hard gate; model-judged requirements are left
                       UNVERIFIED and pass (no model at all)
``hybrid``             the hard gate, then the verifier (checklist mode)
``pg_checklist``       the verifier alone: checklist + raw policy + dialogue
``pg_raw``             the verifier alone: raw policy + dialogue
``pg_raw_traj``        the verifier alone: raw policy, no dialogue
``pg_checklist_only``  the verifier alone: checklist, no raw policy
=====================  =====================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.errors import ConfigError
from policyguard.trajectory.messages import ToolCall, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.guard.core import Guard
    from policyguard.verifier.models import Model

CONFIGS: tuple[str, ...] = (
    "baseline",
    "args_only",
    "pg_checklist",
    "pg_raw",
    "pg_raw_traj",
    "pg_checklist_only",
    "gate_only",
    "hybrid",
)
VERIFIER_MODES: dict[str, str] = {
    "hybrid": "checklist",
    "pg_checklist": "checklist",
    "pg_raw": "raw",
    "pg_raw_traj": "raw_traj",
    "pg_checklist_only": "checklist_only",
}
ARGS_ONLY_VARIABLES = frozenset({"args", "now"})


class CallChecker(Protocol):
    """Anything that decides a pending call given the dialogue (a :class:`Guard`)."""

    def check(self, call: ToolCall, trajectory: Trajectory) -> Decision: ...


def needs_verifier(config: str) -> bool:
    return config in VERIFIER_MODES


def args_only_checklist(checklist: Checklist) -> Checklist:
    """The checklist cut down to requirements whose check reads only ``args`` (and ``now``)."""
    from policyguard.gate.cel import compile_check

    def keep(check: str | None) -> bool:
        return check is not None and compile_check(check).variables() <= ARGS_ONLY_VARIABLES

    tools = {
        name: spec.model_copy(update={"requirements": [r for r in spec.requirements if keep(r.check)]})
        for name, spec in checklist.tools.items()
    }
    rules = [r for r in checklist.general_rules if keep(r.check)]
    return checklist.model_copy(update={"tools": tools, "general_rules": rules})


def build_guard(
    config: str,
    checklist: Checklist,
    policy_text: str,
    *,
    verifier_model: Model | None = None,
    principal: str | None = None,
) -> Guard | None:
    """The guard for ``config``; ``None`` for the baseline."""
    if config not in CONFIGS:
        raise ConfigError(f"unknown config {config!r}; expected one of {', '.join(CONFIGS)}")
    if config == "baseline":
        return None
    from policyguard.gate.hardgate import HardGate
    from policyguard.guard.core import Guard

    if config in ("gate_only", "args_only"):
        used = args_only_checklist(checklist) if config == "args_only" else checklist
        return Guard(used, policy_text, gate=HardGate(used), allow_unverified=True, principal=principal)
    if verifier_model is None:
        raise ConfigError(f"config {config!r} needs a verifier model (--verifier-model)")
    from policyguard.verifier.llm import LLMVerifier

    verifier = LLMVerifier(verifier_model, mode=VERIFIER_MODES[config])  # type: ignore[arg-type]
    gate = HardGate(checklist) if config == "hybrid" else None
    return Guard(checklist, policy_text, gate=gate, verifier=verifier, principal=principal)
