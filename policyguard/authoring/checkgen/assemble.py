"""Turning step outputs into one checklist: fact merging, id clean-up, the review changelog.

These are pure functions over requirement lists, kept apart from the model
exchange so each rule (a fact declared twice differently is a problem; a
duplicate id is renamed, not dropped; every reviewer change is listed) can be
read and tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from policyguard.checklist.schema import FactSource, Requirement

from ..validate import Problem

GENERAL = "general_rules"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def merge_facts(
    target: dict[str, FactSource],
    new: Mapping[str, FactSource],
    origin: str,
    problems: list[Problem],
) -> None:
    """Add ``new`` facts to ``target``; a name declared again differently is an error, the first kept."""
    for name, source in new.items():
        old = target.get(name)
        if old is None:
            target[name] = source
        elif old != source:
            problems.append(
                Problem(
                    field=f"facts.{name}",
                    message=(
                        f"{origin} declares fact {name!r} as {source.model_dump(exclude_none=True)} but it is "
                        f"already {old.model_dump(exclude_none=True)}; kept the first - check the requirements "
                        "that read it"
                    ),
                )
            )


def unique_ids(
    scopes: Sequence[tuple[str, list[Requirement]]], changes: list[dict[str, Any]]
) -> dict[str, list[Requirement]]:
    """Rename requirement ids that repeat (across tools and general rules) to ``<scope>.<id>``.

    A checklist with a duplicate id does not load, and dropping a duplicate
    would lose a requirement, so the later one is renamed and the rename logged.
    """
    seen: set[str] = set()
    result: dict[str, list[Requirement]] = {}
    for scope, requirements in scopes:
        prefix = "general" if scope == GENERAL else _ID_UNSAFE.sub("_", scope)
        renamed: list[Requirement] = []
        for req in requirements:
            new_id = req.id
            if new_id in seen:
                new_id = f"{prefix}.{req.id}"
                n = 2
                while new_id in seen:
                    new_id = f"{prefix}.{req.id}-{n}"
                    n += 1
                changes.append({"scope": scope, "change": "renamed", "id": req.id, "new_id": new_id})
                req = req.model_copy(update={"id": new_id})
            seen.add(new_id)
            renamed.append(req)
        result[scope] = renamed
    return result


def requirement_changes(
    draft: Mapping[str, Sequence[Requirement]], revised: Mapping[str, Sequence[Requirement]]
) -> list[dict[str, Any]]:
    """What the reviewer added, removed and modified, scope by scope (tool name or general_rules)."""
    changes: list[dict[str, Any]] = []
    scopes = list(draft) + [s for s in revised if s not in draft]
    for scope in scopes:
        before = {r.id: r for r in draft.get(scope, [])}
        after = {r.id: r for r in revised.get(scope, [])}
        for rid, req in before.items():
            if rid not in after:
                changes.append({"scope": scope, "change": "removed", "id": rid, "text": req.text})
        for rid, req in after.items():
            if rid not in before:
                changes.append({"scope": scope, "change": "added", "id": rid, "text": req.text})
                continue
            old = before[rid].model_dump(mode="json")
            new = req.model_dump(mode="json")
            fields = sorted(k for k in new if new[k] != old.get(k))
            if fields:
                changes.append({"scope": scope, "change": "modified", "id": rid, "fields": fields})
    return changes


def fact_changes(draft: Mapping[str, FactSource], revised: Mapping[str, FactSource]) -> list[dict[str, Any]]:
    """Facts the reviewer added or redefined (facts are merged, never removed by the review)."""
    changes: list[dict[str, Any]] = []
    for name, source in revised.items():
        if name not in draft:
            changes.append({"scope": "facts", "change": "added", "id": name, "tool": source.tool})
        elif draft[name] != source:
            changes.append({"scope": "facts", "change": "modified", "id": name, "tool": source.tool})
    return changes
