"""Escalation to a person: the approval queue, the flow that binds an approval to one call, its stores.

:mod:`.queue` records requests and decisions (SQLite), :mod:`.pgqueue` the
same tables in PostgreSQL, :mod:`.url` opens either by URL, and :mod:`.flow`
turns a call the gate may escalate into a request and a person's answer into
a decision bound to that exact call.

May use: :mod:`policyguard.enforcement`, :mod:`policyguard.gate`,
:mod:`policyguard.audit`, :mod:`policyguard.checklist`,
:mod:`policyguard.trajectory` and the base modules.
"""

from __future__ import annotations
