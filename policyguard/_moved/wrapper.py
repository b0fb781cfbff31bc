"""Moved to :mod:`policyguard.integrations.openai_loop`; this path works until the next release."""

from policyguard._compat import forward

forward(__name__)
