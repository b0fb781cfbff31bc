"""Experiments on the real tau2 benchmark (optional extra ``policyguard[tau2]``).

* :mod:`.replay` - the offline replay suite (gold writes must pass, injected
  violations from :mod:`.violations` must block; probes in :mod:`.probes`);
* :mod:`.agent` - the guarded tau2 agent (a blocked call never reaches the
  trajectory; the remediation goes back to the model);
* :mod:`.runner` - ``bench tau2``: simulations with checkpoints and resume;
* :mod:`.metrics` / :mod:`.report` - pass^k, PV/Mut, per-call confusion, plots;
* :mod:`.labels` - PV/Mut task labels and the per-call ground truth.

Nothing here imports tau2 (or litellm) at import time.
"""

from __future__ import annotations

from .guarding import CONFIGS, build_guard
from .labels import CALL_TRUTH_RULE, LABEL_RULE, POLICY_CONTRADICTING_GOLD

__all__ = ["CALL_TRUTH_RULE", "CONFIGS", "LABEL_RULE", "POLICY_CONTRADICTING_GOLD", "build_guard"]
