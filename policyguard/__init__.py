"""PolicyGuard: enforce company policy on LLM agents at the tool boundary.

The public API is listed in ``__all__``. Names load on first use (PEP 562), so
``import policyguard`` stays cheap; the provider SDKs load only when a model is
actually called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports

__version__ = "0.1.0"


_EXPORTS: dict[str, str] = {
    "Checklist": ".checklist.schema",
    "Requirement": ".checklist.schema",
    "ToolSpec": ".checklist.schema",
    "load_checklist": ".checklist.schema",
    "parse_checklist": ".checklist.schema",
    "Decision": ".decision",
    "RequirementResult": ".decision",
    "Usage": ".decision",
    "ChecklistError": ".errors",
    "ConfigError": ".errors",
    "FormatError": ".errors",
    "ModelError": ".errors",
    "PolicyGuardError": ".errors",
    "ScriptedModelError": ".errors",
    "TemplateError": ".errors",
    "Guard": ".guard.core",
    "after_block": ".guard.remediation",
    "remediation_message": ".guard.remediation",
    "GuardedTools": ".integrations.openai_loop",
    "ToolOutcome": ".integrations.openai_loop",
    "Message": ".trajectory.messages",
    "ToolCall": ".trajectory.messages",
    "ToolResult": ".trajectory.messages",
    "Trajectory": ".trajectory.messages",
    "Model": ".verifier.models",
    "ModelRequest": ".verifier.models",
    "ModelResponse": ".verifier.models",
    "ScriptedModel": ".verifier.models",
    "resolve_model": ".verifier.models",
    "CheckContext": ".stages",
    "Gate": ".stages",
    "Verifier": ".stages",
    "Trace": ".audit.trace",
    "read_trace": ".audit.trace",
    "HardGate": ".gate.hardgate",
    "StateResolver": ".gate.facts",
    "LLMVerifier": ".verifier.llm",
    "GrantIssuer": ".enforcement.grants",
    "GrantVerifier": ".enforcement.grants",
    "GrantError": ".enforcement.grants",
    "generate_keypair": ".enforcement.grants",
    "GuardedExecutor": ".enforcement.executor",
    "SQLiteStore": ".enforcement.store",
    "Session": ".session",
    "SessionStore": ".session",
    "MemorySessionStore": ".session",
    "LedgerUnavailable": ".enforcement.store",
    "validate_checklist": ".authoring.validate",
    "to_trajectory": ".trajectory.formats",
    "from_trajectory": ".trajectory.formats",
}

__all__ = [
    "__version__",
    "after_block",
    "CheckContext",
    "Checklist",
    "ChecklistError",
    "ConfigError",
    "Decision",
    "FormatError",
    "from_trajectory",
    "Gate",
    "generate_keypair",
    "GrantError",
    "GrantIssuer",
    "GrantVerifier",
    "Guard",
    "GuardedExecutor",
    "GuardedTools",
    "HardGate",
    "LedgerUnavailable",
    "LLMVerifier",
    "load_checklist",
    "MemorySessionStore",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "parse_checklist",
    "PolicyGuardError",
    "read_trace",
    "remediation_message",
    "Requirement",
    "RequirementResult",
    "resolve_model",
    "ScriptedModel",
    "ScriptedModelError",
    "Session",
    "SessionStore",
    "SQLiteStore",
    "StateResolver",
    "TemplateError",
    "to_trajectory",
    "ToolCall",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "Trajectory",
    "Usage",
    "validate_checklist",
    "Verifier",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from policyguard.audit.trace import Trace, read_trace
    from policyguard.authoring.validate import validate_checklist
    from policyguard.checklist.schema import Checklist, Requirement, ToolSpec, load_checklist, parse_checklist
    from policyguard.decision import Decision, RequirementResult, Usage
    from policyguard.enforcement.executor import GuardedExecutor
    from policyguard.enforcement.grants import GrantError, GrantIssuer, GrantVerifier, generate_keypair
    from policyguard.enforcement.store import LedgerUnavailable, SQLiteStore
    from policyguard.errors import (
        ChecklistError,
        ConfigError,
        FormatError,
        ModelError,
        PolicyGuardError,
        ScriptedModelError,
        TemplateError,
    )
    from policyguard.gate.facts import StateResolver
    from policyguard.gate.hardgate import HardGate
    from policyguard.guard.core import Guard
    from policyguard.guard.remediation import after_block, remediation_message
    from policyguard.integrations.openai_loop import GuardedTools, ToolOutcome
    from policyguard.session import MemorySessionStore, Session, SessionStore
    from policyguard.stages import CheckContext, Gate, Verifier
    from policyguard.trajectory.formats import from_trajectory, to_trajectory
    from policyguard.trajectory.messages import Message, ToolCall, ToolResult, Trajectory
    from policyguard.verifier.llm import LLMVerifier
    from policyguard.verifier.models import Model, ModelRequest, ModelResponse, ScriptedModel, resolve_model
