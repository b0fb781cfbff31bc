"""Checklist generation: a policy and its tools in, a reviewed, validated checklist out.

Nothing here is imported by ``import policyguard``; the CLI imports it on use.
The names below load their modules on first access, so registering the
``checklist generate`` command (:mod:`.cli`) does not import the pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from ..tools import ToolInfo, ToolsError, load_tools
    from .ask import CheckgenError, StepFailed
    from .pipeline import GenerateResult, generate_checklist

_HOMES = {
    "CheckgenError": ".ask",
    "StepFailed": ".ask",
    "GenerateResult": ".pipeline",
    "generate_checklist": ".pipeline",
    "ToolInfo": "..tools",
    "ToolsError": "..tools",
    "load_tools": "..tools",
}

__all__ = [
    "CheckgenError",
    "GenerateResult",
    "StepFailed",
    "ToolInfo",
    "ToolsError",
    "generate_checklist",
    "load_tools",
]


__getattr__ = lazy_exports(__name__, _HOMES)
