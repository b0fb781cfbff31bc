"""The benchmarks: tau2 replay, simulations and pass^k runs, the refund case, the INV-1 fault harness.

Behind ``policyguard bench``; the tau2 parts need the ``tau2`` extra. Nothing
in the library imports this package: it is a user of the library like any
other, and the import contract in ``.importlinter`` keeps it so.

May use: anything in :mod:`policyguard` except the other edges.
"""
