"""Moved to :mod:`policyguard.approvals.pgqueue`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
