"""Moved to :mod:`policyguard.verifier.models`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
