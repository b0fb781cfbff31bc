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

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports

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


# Loaded on first use: importing one module of this package (e.g. from the
# gate-only path) must not load the rest of it.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, ".hardgate"))
