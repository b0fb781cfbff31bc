"""What the replay suite needs to know about one tau2 domain: its :class:`ReplayDomain`.

Each domain's folder (``domains/<name>/``) builds its own from its violations, its
gold labels, who a task's customer is, and the reads a diligent agent makes
before a write that the checklist's facts alone cannot name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cases import ViolationCase

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.tasks import Task

    from .transcript import Transcript

Generator = Callable[..., list[ViolationCase]]


@dataclass(frozen=True)
class ReplayDomain:
    """One domain's part of the replay suite.

    ``prepare(transcript, tool, arguments, user_id)`` makes the domain's extra
    reads before a write and returns them as ``tool(args)`` labels.
    ``evaluator_classes`` are tried in order for the violation injected into
    the gold dialogue for tau2's evaluator: it must be one tau2 executes (so
    executing it changes the database and drops the reward); empty when the
    domain has none (telecom).
    """

    name: str
    classes: dict[str, str]
    not_expressible: dict[str, str]
    generate: Generator
    contradicting_gold: dict[str, str]
    gold_disagreements: dict[str, str]
    user_id: Callable[[Task], str | None]
    evaluator_classes: tuple[str, ...]
    prepare: Callable[[Transcript, str, dict[str, Any], str | None], list[str]] = field(
        default=lambda transcript, tool, arguments, user_id: []
    )


def read_label(tool: str, keys: dict[str, Any]) -> str:
    """A read as the replay lists it in ``inserted_reads``: ``tool({"key": value})``."""
    import json

    return f"{tool}({json.dumps(keys, sort_keys=True)})"
