"""Moved to :mod:`policyguard.trajectory.canonical`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
