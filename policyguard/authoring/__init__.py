"""Writing checklists: validating one, starting one from a tool list, generating one from a policy.

:mod:`.validate` checks a checklist file beyond its schema (CEL compiles,
examples agree with the gate and the evidence rules), :mod:`.checkinit`
writes a skeleton, :mod:`.checkgen` drafts requirements with a model.
These run the gate and the verifier's rules, so they sit above both.

May use: :mod:`policyguard.gate`, :mod:`policyguard.verifier`,
:mod:`policyguard.checklist`, :mod:`policyguard.trajectory` and the base
modules.
"""
