"""Checklist generation: a policy and its tools in, a reviewed, validated checklist out.

Nothing here is imported by ``import policyguard``; the CLI imports it on use.
"""

from __future__ import annotations

from .ask import CheckgenError, StepFailed
from .pipeline import GenerateResult, generate_checklist
from .tools import ToolInfo, ToolsError, load_tools

__all__ = [
    "CheckgenError",
    "GenerateResult",
    "StepFailed",
    "ToolInfo",
    "ToolsError",
    "generate_checklist",
    "load_tools",
]
