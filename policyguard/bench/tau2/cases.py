"""An injected policy violation, and how a domain's generator picks its cases.

Each domain's violations (``domains/<name>/violations.py``) build :class:`ViolationCase`
objects from the domain's real database; the replay suite attempts every domain's the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ViolationCase:
    """One forbidden call with the context it is attempted in.

    ``reads`` are made in order before the call (the first is normally the
    user lookup that authenticates the principal). With ``skip_reads`` the
    harness adds nothing else; otherwise it adds every read the checklist's
    facts need, so the case tests the policy, not a forgotten read.
    """

    cls: str
    case_id: str
    user_id: str
    request: str
    reads: tuple[tuple[str, dict[str, Any]], ...]
    tool: str
    arguments: dict[str, Any]
    skip_reads: bool = False
    resources: frozenset[str] = field(default_factory=frozenset)
    setup: tuple[tuple[str, dict[str, Any]], ...] = ()
    """Writes executed (unchecked, on a private environment) after ``reads``: the state the call is attempted in."""
    init: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    """(environment, function, arguments) run on a fresh environment before anything, as tau2 sets up a task's
    initial state (telecom: a line suspended for an overdue bill, a contract that has ended)."""


def take(
    builders: Mapping[str, Callable[[Any], Iterator[ViolationCase]]],
    db: Any,
    per_class: int,
    classes: Iterable[str] | None,
) -> list[ViolationCase]:
    """The first ``per_class`` cases each builder yields over ``db``, in builder order (every domain's generator)."""
    wanted = set(builders) if classes is None else set(classes)
    cases: list[ViolationCase] = []
    for cls, build in builders.items():
        if cls not in wanted:
            continue
        found = build(db)
        for _ in range(per_class):
            case = next(found, None)
            if case is None:
                break
            cases.append(case)
    return cases
