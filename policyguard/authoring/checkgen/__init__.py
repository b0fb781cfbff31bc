"""Checklist generation: a policy and its tools in, a reviewed, validated checklist out.

Nothing here is imported by ``import policyguard``; the CLI imports it on use.
The names below load their modules on first access, so registering the
``checklist generate`` command (:mod:`.cli`) does not import the pipeline.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)
