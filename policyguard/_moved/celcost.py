"""Moved to :mod:`policyguard.gate.celcost`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
