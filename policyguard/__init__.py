"""PolicyGuard: enforce company policy on LLM agents at the tool boundary."""

from __future__ import annotations

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
from .messages import Message, ToolCall, ToolResult, Trajectory
from .models import Model, ModelRequest, ModelResponse, ScriptedModel, resolve_model

__version__ = "0.1.0"

__all__ = [
    "Checklist",
    "ChecklistError",
    "ConfigError",
    "Decision",
    "FormatError",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "PolicyGuardError",
    "Requirement",
    "RequirementResult",
    "ScriptedModel",
    "ScriptedModelError",
    "TemplateError",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Trajectory",
    "Usage",
    "__version__",
    "load_checklist",
    "parse_checklist",
    "resolve_model",
]
