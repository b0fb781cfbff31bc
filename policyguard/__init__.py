"""PolicyGuard: enforce company policy on LLM agents at the tool boundary.

The public API is listed in ``__all__``. Names load on first use (PEP 562), so
``import policyguard`` stays cheap; the provider SDKs load only when a model is
actually called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Checklist": "checklist",
    "Requirement": "checklist",
    "ToolSpec": "checklist",
    "load_checklist": "checklist",
    "parse_checklist": "checklist",
    "Decision": "decision",
    "RequirementResult": "decision",
    "Usage": "decision",
    "ChecklistError": "errors",
    "ConfigError": "errors",
    "FormatError": "errors",
    "ModelError": "errors",
    "PolicyGuardError": "errors",
    "ScriptedModelError": "errors",
    "TemplateError": "errors",
    "Guard": "guard",
    "after_block": "guard",
    "remediation_message": "guard",
    "GuardedTools": "wrapper",
    "ToolOutcome": "wrapper",
    "Message": "messages",
    "ToolCall": "messages",
    "ToolResult": "messages",
    "Trajectory": "messages",
    "Model": "models",
    "ModelRequest": "models",
    "ModelResponse": "models",
    "ScriptedModel": "models",
    "resolve_model": "models",
    "CheckContext": "stages",
    "Gate": "stages",
    "Verifier": "stages",
    "Trace": "trace",
    "read_trace": "trace",
    "HardGate": "gate",
    "StateResolver": "facts",
    "LLMVerifier": "verifier",
    "GrantIssuer": "grants",
    "GrantVerifier": "grants",
    "GrantError": "grants",
    "generate_keypair": "grants",
    "GuardedExecutor": "executor",
    "SQLiteStore": "store",
    "Session": "session",
    "SessionStore": "session",
    "MemorySessionStore": "session",
    "LedgerUnavailable": "store",
    "validate_checklist": "validate",
    "to_trajectory": "formats",
    "from_trajectory": "formats",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'policyguard' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .checklist import Checklist, Requirement, ToolSpec, load_checklist, parse_checklist
    from .decision import Decision, RequirementResult, Usage
    from .errors import (
        ChecklistError,
        ConfigError,
        FormatError,
        ModelError,
        PolicyGuardError,
        ScriptedModelError,
        TemplateError,
    )
    from .executor import GuardedExecutor
    from .facts import StateResolver
    from .formats import from_trajectory, to_trajectory
    from .gate import HardGate
    from .grants import GrantError, GrantIssuer, GrantVerifier, generate_keypair
    from .guard import Guard, after_block, remediation_message
    from .messages import Message, ToolCall, ToolResult, Trajectory
    from .models import Model, ModelRequest, ModelResponse, ScriptedModel, resolve_model
    from .session import MemorySessionStore, Session, SessionStore
    from .stages import CheckContext, Gate, Verifier
    from .store import LedgerUnavailable, SQLiteStore
    from .trace import Trace, read_trace
    from .validate import validate_checklist
    from .verifier import LLMVerifier
    from .wrapper import GuardedTools, ToolOutcome
