"""Moved to :mod:`policyguard.audit.inv1`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
