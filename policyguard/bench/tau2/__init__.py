"""Experiments on the real tau2 benchmark (optional extra ``policyguard[tau2]``).

* :mod:`.replay` - the offline replay suite (gold writes must pass, injected
  violations from :mod:`.violations` must block; probes in :mod:`.probes`);
* :mod:`.agent` - the guarded tau2 agent (a blocked call never reaches the
  trajectory; the remediation goes back to the model);
* :mod:`.runner` - ``bench tau2``: simulations with checkpoints and resume;
* :mod:`.metrics` / :mod:`.report` - pass^k, PV/Mut, per-call confusion, plots;
* :mod:`.labels` - PV/Mut task labels and the per-call ground truth.

Nothing here imports tau2 (or litellm) at import time, and the names below
load their modules on first access (the CLI parser reads ``guarding.CONFIGS``
without loading the labels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyguard._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .domains.airline.labels import POLICY_CONTRADICTING_GOLD
    from .guarding import CONFIGS, build_guard
    from .labels import CALL_TRUTH_RULE, LABEL_RULE

_HOMES = {
    "CONFIGS": ".guarding",
    "build_guard": ".guarding",
    "CALL_TRUTH_RULE": ".labels",
    "LABEL_RULE": ".labels",
    "POLICY_CONTRADICTING_GOLD": ".domains.airline.labels",
}

__all__ = ["CALL_TRUTH_RULE", "CONFIGS", "LABEL_RULE", "POLICY_CONTRADICTING_GOLD", "build_guard"]


__getattr__ = lazy_exports(__name__, _HOMES)
