"""The name this library is installed under, and the install hint every error gives.

The import name is ``policyguard`` and so is the command, but the distribution on PyPI
is ``policyguard-agents``: the name ``policyguard`` there belongs to an unrelated
project with its own ``policyguard`` command. Every "install the extra" message is built
here, so no hint can name the wrong package.
"""

from __future__ import annotations

DIST_NAME = "policyguard-agents"


def checkout_install(extra: str) -> str:
    """The install line for an extra from a checkout of this repository (until a release is on PyPI)."""
    return f"pip install -e '.[{extra}]'"


def install_hint(extra: str) -> str:
    """``pip install 'policyguard-agents[EXTRA]'`` plus the line that works from a checkout."""
    return f"pip install '{DIST_NAME}[{extra}]' (from a checkout: {checkout_install(extra)})"
