"""Moved to :mod:`policyguard.bench.tau2`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
