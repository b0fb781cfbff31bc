"""Which reads the guard may make itself, and the view that holds them (the gate's side of fetching).

When the gate blocks a write only for evidence the dialogue lacks, a host that
gave the guard its read tools lets the guard make those reads itself
(:mod:`policyguard.guard.fetching` runs them). This module says which:

* only for requirements whose failure a read can cure: a missing fact, a
  prerequisite read not made, or a check over a fact that names how to fetch
  it (``FactSource.fetch``). One other failure (a false check no read can
  change, a missing principal) and nothing is fetched: the block stands;
* a ``newest`` fact missing (never read, read for another record, changed by
  a later write) is read with its match keys; a ``collect: all``/``calls``
  fact with keys is read with them when no successful read with those
  arguments exists; ``fetch`` gives the argument maps of the others (the
  product of each replaced item, the search for the booking's route);
* only tools the checklist declares ``mutating: false`` (an unknown tool is
  mutating), and never the same read twice in one decision.

A fetched read never authenticates anyone: the gate judges the view with the
principal resolved before any fetch, and :func:`~policyguard.gate.facts.resolve_principal`
skips every call whose id carries :data:`FETCH_ID_PREFIX`.

:class:`FetchedView` places each fetched read after every answered call before
the pending one (it was made after their results were in) and before every
call still unanswered (it may or may not have seen that call's effect: fail
closed), never after the pending call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.trajectory.messages import CallSite, HasToolResults, ToolCall, ToolResult, group_successes

from .cel import CelError, CheckProgram, compile_check
from .facts import FETCH_ID_PREFIX, calls_before, fact_closure, resolve_facts

__all__ = ["FETCH_ID_PREFIX", "MISSING_EVIDENCE", "FetchedView", "ReadCall", "reads_to_fetch"]

MISSING_EVIDENCE = ("missing fact", "prerequisite read not made")
_CURABLE = MISSING_EVIDENCE


@dataclass(frozen=True)
class ReadCall:
    """One read the guard may make: ``tool(**arguments)``, for ``fact``."""

    tool: str
    arguments: dict[str, Any]
    fact: str

    @property
    def label(self) -> str:
        return f"{self.tool}({json.dumps(self.arguments, sort_keys=True, default=str)})"


@lru_cache(maxsize=1024)
def _program(expression: str) -> CheckProgram:
    return compile_check(expression)


def _check_facts(checklist: Checklist, tool: str, ids: set[str]) -> set[str]:
    names: set[str] = set()
    for req in checklist.requirements_for(tool):
        if req.id in ids and req.check is not None:
            names |= _program(req.check).fact_names()
    return names


def _fetch_facts(checklist: Checklist, names: set[str]) -> set[str]:
    """The facts the ``fetch`` expressions of ``names`` read."""
    out: set[str] = set()
    for name in names:
        source = checklist.facts.get(name)
        if source is not None and source.fetch is not None:
            try:
                out |= _program(source.fetch).fact_names()
            except CelError:
                continue
    return out


def curable(checklist: Checklist, decision: Decision) -> set[str] | None:
    """The ids of the NOT_MET requirements when a read could cure every one of them, else None."""
    if decision.outcome != "block" or decision.stage != "gate" or decision.tool is None:
        return None
    not_met = [r for r in decision.requirements if r.status == "NOT_MET"]
    if not not_met:
        return None
    reqs = {r.id: r for r in checklist.requirements_for(decision.tool)}
    for result in not_met:
        evidence = result.evidence or ""
        if evidence.startswith(_CURABLE):
            continue
        req = reqs.get(result.id)
        if req is None or req.check is None or not evidence.startswith("check is false"):
            return None  # a missing principal, an error, a budget: no read changes it
        facts = fact_closure(checklist, _program(req.check).fact_names())
        if not any(checklist.facts[f].fetch is not None for f in facts if f in checklist.facts):
            return None
    return {r.id for r in not_met}


def reads_to_fetch(
    checklist: Checklist,
    call: ToolCall,
    view: HasToolResults,
    decision: Decision,
    principal: str,
    tried: set[str],
) -> list[ReadCall]:
    """The reads that could cure ``decision``'s block, not in ``tried`` (labels), read-only tools only."""
    ids = curable(checklist, decision)
    if ids is None:
        return []
    checked = _check_facts(checklist, call.name, ids)
    needed = fact_closure(checklist, checked | _fetch_facts(checklist, fact_closure(checklist, checked)))
    facts = resolve_facts(checklist, call, view, needed, principal=principal)
    sites = calls_before(view, call)
    reads: list[ReadCall] = []
    for name in sorted(fact_closure(checklist, checked)):
        source = checklist.facts.get(name)
        if source is None:
            continue
        keys = facts.keys.get(name)
        if source.collect == "newest":
            if name in facts.missing and keys:  # keys known: the fact itself is what is missing
                reads.append(ReadCall(source.tool, dict(keys), name))
        elif keys and not _answered(sites, source.tool, keys):
            reads.append(ReadCall(source.tool, dict(keys), name))
        if source.fetch is not None:
            reads += _fetch_reads(name, source.fetch, source.tool, call, facts.values, principal, sites)
    out: list[ReadCall] = []
    seen = set(tried)
    for read in reads:
        if read.label in seen or checklist.is_mutating(read.tool):
            continue
        seen.add(read.label)
        out.append(read)
    return out


def _fetch_reads(
    name: str,
    expression: str,
    tool: str,
    call: ToolCall,
    values: dict[str, Any],
    principal: str,
    sites: list[CallSite],
) -> list[ReadCall]:
    """The argument maps ``fetch`` gives (none when it reads a fact that is missing or cannot be evaluated)."""
    try:
        program = _program(expression)
        if not program.fact_names() <= set(values):
            return []
        facts = {f: values[f] for f in program.fact_names()}
        found = program.evaluate({"args": call.arguments, "facts": facts, "principal": principal})
    except CelError:
        return []
    if not isinstance(found, list):
        return []
    out: list[ReadCall] = []
    for entry in found[:16]:
        if isinstance(entry, dict) and all(isinstance(k, str) for k in entry):
            try:  # plain JSON values, not the CEL engine's types
                arguments = json.loads(json.dumps(entry))
            except (TypeError, ValueError):
                continue
            if not _answered(sites, tool, arguments):
                out.append(ReadCall(tool, arguments, name))
    return out


def _answered(sites: list[CallSite], tool: str, arguments: dict[str, Any]) -> bool:
    """A successful call of ``tool`` made with exactly these arguments (or a superset) is in the view."""
    for site in sites:
        if site.call.name != tool or site.result is None or site.result.is_error:
            continue
        if all(k in site.call.arguments and site.call.arguments[k] == v for k, v in arguments.items()):
            return True
    return False


class FetchedView:
    """The calls before the pending one plus the guard's fetched reads, placed as the module doc says.

    Message numbers are doubled so a fetched read can sit between two of the
    host's messages: at ``2m + 1`` after message ``m`` when every call before
    the pending one is answered, else at ``2u - 1`` just before the first
    message ``u`` holding an unanswered call.
    """

    paired = True
    excludes_pending = True

    def __init__(self, base: list[CallSite], fetched: list[tuple[ToolCall, ToolResult]]) -> None:
        sites = [CallSite(s.call, (2 * s.order[0], s.order[1]), s.result) for s in base]
        open_messages = [s.order[0] for s in sites if s.result is None]
        last = max((s.order[0] for s in sites), default=0)
        number = (min(open_messages) - 1) if open_messages else last + 1
        for position, (call, result) in enumerate(fetched):
            order = (number, position)
            sites.append(CallSite(call, order, result.model_copy(update={"order": order})))
        sites.sort(key=lambda s: s.order)
        self._sites = sites
        self.messages: list[Any] | None = None

    def call_sites(self) -> list[CallSite]:
        return self._sites

    def tool_results(self) -> Iterator[ToolResult]:
        return iter([s.result for s in self._sites if s.result is not None])

    def successes_by_tool(self) -> dict[str, list[ToolResult]]:
        return group_successes(self.tool_results())

    def said_words(self) -> dict[str, int]:
        return {}  # a fetched view never authenticates: the principal is given (see the module doc)
