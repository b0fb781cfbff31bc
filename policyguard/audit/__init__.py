"""What happened, written down and checked afterwards: the trace, the INV-1 audit and the counters.

:mod:`.trace` appends one JSON line per decision and effect; :mod:`.inv1`
replays a trace and proves that no effect ran without a grant that allowed it;
:mod:`.counters` keeps the verdict and runtime views of a run.

May use: :mod:`policyguard.trajectory`, :mod:`policyguard.errors`.
"""
