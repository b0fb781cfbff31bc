"""The deterministic hard gate: checks that can be proven from the call and trusted facts.

:mod:`.hardgate` runs a tool's CEL checks (:mod:`.cel`, with the cost bound
of :mod:`.celcost` and the worker of :mod:`.celprocess`) over facts read
from trusted tool results (:mod:`.facts`, pruned to the paths the checks read
by :mod:`.factpaths`); :mod:`.effects` holds the money-effect rules the guard
and the executor both apply.

May use: :mod:`policyguard.checklist`, :mod:`policyguard.trajectory` and the
base modules (``decision``, ``stages``, ``errors``). Never the verifier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .hardgate import (
        INVALIDATION_VARIABLES,
        MATCH_VARIABLES,
        HardGate,
        JudgedBy,
        compile_checklist_checks,
    )

__all__ = [
    "INVALIDATION_VARIABLES",
    "MATCH_VARIABLES",
    "HardGate",
    "JudgedBy",
    "compile_checklist_checks",
]


def __getattr__(name: str) -> Any:
    # Loaded on first use: importing one module of this package (e.g. from the
    # gate-only path) must not load the rest of it.
    if name in __all__:
        value = getattr(importlib.import_module(".hardgate", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
