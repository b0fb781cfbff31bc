"""Each tau2 domain's part of the replay suite, found in its folder under ``domains/``.

The suite (:mod:`.replay`) is the same for every domain; ``domains/<name>/``
supplies the :class:`~.profile.ReplayDomain`: the domain's violation classes and
generator, the gold it reports apart, who a task's customer is, and the reads a
diligent agent makes before a write that the checklist's facts alone cannot name
(retail: the authenticating lookup and the product details of items being
exchanged or modified; telecom: the customer looked up by phone).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from policyguard.errors import ConfigError

from .profile import ReplayDomain

if TYPE_CHECKING:  # pragma: no cover
    from .domain import DomainData


def _module(domain: str) -> ModuleType:
    try:
        return importlib.import_module(f"{__package__}.domains.{domain}")
    except ModuleNotFoundError as exc:
        raise ConfigError(f"the replay suite has no violations for the {domain!r} domain") from exc


def replay_domain(data: DomainData) -> ReplayDomain:
    """The replay profile of ``data.domain``."""
    profile: ReplayDomain = _module(data.domain).profile(data)
    return profile


def disagreements(domain: str) -> dict[str, str]:
    """The gold disagreements explained in the table for ``domain`` (no database needed)."""
    found: dict[str, str] = _module(domain).GOLD_DISAGREEMENTS
    return found
