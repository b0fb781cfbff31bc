"""Where a decision becomes (or does not become) an effect: grants, the executor and its stores.

:mod:`.grants` issues and verifies signed, single-use, call-bound grants
(:mod:`.jws` is their codec); :mod:`.executor` verifies a grant, re-checks the
money effect and the approval it needs (:mod:`.approvalcheck`) and runs the
tool; :mod:`.store` (SQLite) and :mod:`.pgstore` (PostgreSQL) keep spent
nonces, denials and the ledger, with :mod:`.groupcommit`, :mod:`.purge`,
:mod:`.scoped` and :mod:`.storeurl` around them.

May use: :mod:`policyguard.gate` (effect rules), :mod:`policyguard.session`,
:mod:`policyguard.audit`, :mod:`policyguard.checklist`,
:mod:`policyguard.trajectory` and the base modules. Never the guard, an edge
or a benchmark.
"""
