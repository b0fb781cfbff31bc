"""Moved to :mod:`policyguard.authoring.validate`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
