"""The name this library is installed under, and the install hint every error gives.

The import name is ``policyguard`` and so is the command, but the distribution is named
``policyguard-agents``: on PyPI the name ``policyguard`` belongs to an unrelated
project with its own ``policyguard`` command. No release is on PyPI yet, so every "install
the extra" message, built here, gives the line that works from a checkout and names no
package to fetch.
"""

from __future__ import annotations

DIST_NAME = "policyguard-agents"


def checkout_install(extra: str) -> str:
    """The install line for an extra from a checkout of this repository, pinned as CI tests it."""
    return f"pip install -c constraints.txt -e '.[{extra}]'"


def install_hint(extra: str) -> str:
    """The line that installs ``extra``: from a checkout, since no release of ``policyguard-agents`` is on PyPI
    yet (a hint naming it would send users to an install that fails, or to whoever registers the name)."""
    return f"{checkout_install(extra)} (from a checkout of this repository)"
