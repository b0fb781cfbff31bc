"""Moved to :mod:`policyguard.authoring.checkinit`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
