"""What the guard reads: messages, tool calls and results, and the provider formats they come in.

The bottom layer. :mod:`.messages` holds the trajectory model, :mod:`.formats`
reads and writes provider message lists, :mod:`.inputs` accepts either at
:meth:`~policyguard.guard.Guard.check`; :mod:`.limits`, :mod:`.strictjson`,
:mod:`.canonical`, :mod:`.jsontext` and :mod:`.toolnames` are the rules every
input from outside passes (bounded size, no duplicate keys, one hash encoding,
near-miss tool names).

May use: :mod:`policyguard.errors` only.
"""
