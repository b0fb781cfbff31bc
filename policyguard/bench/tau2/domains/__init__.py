"""The domain-specific parts of the tau2 bench, one folder per domain.

Each ``domains/<name>/`` holds that domain's injected violations
(``violations.py``), its gold labels and the reads its diligent agent makes,
and exports ``profile(data)``: the :class:`~policyguard.bench.tau2.profile.ReplayDomain`
the replay suite runs with, and ``GOLD_DISAGREEMENTS``. The name is the tau2
domain's; adding a domain to the replay is adding its folder here and its
checklist to ``checklists/``.
"""
