"""Trusted facts and the principal: what a check may believe, and why.

A check reads ``facts.X``; the checklist says fact X is the result of read
tool ``source.tool`` called with arguments computed by ``source.match`` (CEL
over the pending call's ``args``, the trusted ``principal`` and facts resolved
before X). A fact comes from exactly two places:

1. the integrator's :class:`StateResolver`, which re-reads state at execution
   time - fresher than anything in the dialogue, so it wins;
2. otherwise the NEWEST successful result of ``source.tool`` in the trajectory
   whose call arguments equal the keys, parsed as JSON.

Never from user or assistant text: a user who says "my order total is 999" has
stated nothing the gate believes. An error result, a non-JSON result, or a
result for another key is not the fact. A fact that cannot be found is
*missing*, with a remediation saying which read to make; the gate blocks on it.

The principal (the authenticated user) is the integrator's
``CheckContext.principal`` when given; else the checklist's
:class:`~policyguard.checklist.PrincipalSource` - a field of the first
successful lookup result (tau2: the agent authenticates the user by calling
``get_user_details``). That is a tool result answering the agent's own call, so
it is trusted; a user typing "I am user X" is not. The FIRST lookup counts so a
later lookup of someone else cannot switch whose account is acted on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from .cel import CelError, CheckProgram, compile_check
from .checklist import Checklist, FactSource
from .messages import HasToolResults, ToolCall, ToolResult


@runtime_checkable
class StateResolver(Protocol):
    """The integrator's way to re-read state at execution time.

    ``keys`` are the read tool's arguments (``{"order_id": "O1"}``). Return the
    fact's JSON value, or ``None`` when this resolver does not have it (the
    trajectory is then consulted). Raising makes the fact missing (fail closed).
    """

    def resolve(self, fact_name: str, source: FactSource, keys: dict[str, Any]) -> Any | None: ...


@dataclass
class FactsResult:
    """The facts found, the ones missing (fact -> remediation) and resolver reads made.

    ``keys`` holds the read arguments computed for each fact whose match could
    be evaluated; ``reads`` the read call to make (``get_order(order_id="O1")``)
    for each missing fact whose keys are known.
    """

    values: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    resolver_reads: int = 0
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: dict[str, str] = field(default_factory=dict)


def format_read(tool: str, keys: dict[str, Any]) -> str:
    """A read call as the agent would write it: ``get_order(order_id="O1")``."""
    inner = ", ".join(f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in keys.items())
    return f"{tool}({inner})"


def successful_results(
    trajectory: HasToolResults, tool: str, keys: dict[str, Any] | None = None
) -> Iterator[ToolResult]:
    """Non-error results of ``tool`` in order, whose call arguments equal ``keys`` (when given)."""
    for result in trajectory.tool_results():
        if result.call.name != tool or result.is_error:
            continue
        if keys is not None and any(
            name not in result.call.arguments or result.call.arguments[name] != value for name, value in keys.items()
        ):
            continue
        yield result


def fact_dependencies(checklist: Checklist, name: str) -> set[str]:
    """The facts that fact ``name``'s match expressions read (directly)."""
    source = checklist.facts.get(name)
    if source is None:
        return set()
    deps: set[str] = set()
    for expression in source.match.values():
        deps |= _compiled(expression).fact_names()
    return deps


def fact_closure(checklist: Checklist, names: set[str]) -> set[str]:
    """``names`` plus every fact they depend on, transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(fact_dependencies(checklist, name) - seen)
    return seen


def resolve_facts(
    checklist: Checklist,
    call: ToolCall,
    trajectory: HasToolResults,
    needed: set[str],
    resolver: StateResolver | None = None,
    *,
    principal: str | None = None,
) -> FactsResult:
    """Resolve the ``needed`` facts (and the facts they depend on) from trusted sources only."""
    out = FactsResult()
    for name in sorted(needed):
        _resolve_one(name, checklist, call, trajectory, resolver, principal, out, in_progress=set())
    return out


def _resolve_one(
    name: str,
    checklist: Checklist,
    call: ToolCall,
    trajectory: HasToolResults,
    resolver: StateResolver | None,
    principal: str | None,
    out: FactsResult,
    in_progress: set[str],
) -> None:
    if name in out.values or name in out.missing:
        return
    source = checklist.facts.get(name)
    if source is None:
        out.missing[name] = f"the checklist declares no fact named {name!r}"
        return
    if name in in_progress:
        out.missing[name] = f"fact {name!r} depends on itself"
        return
    in_progress.add(name)
    try:
        deps = fact_dependencies(checklist, name)
    except CelError as exc:
        out.missing[name] = f"the checklist's match for fact {name!r} is invalid: {exc}"
        return
    for dep in sorted(deps):
        _resolve_one(dep, checklist, call, trajectory, resolver, principal, out, in_progress)
    absent = sorted(dep for dep in deps if dep in out.missing)
    if absent:
        out.missing[name] = f"{out.missing[absent[0]]} (the {name} is found through the {absent[0]})"
        if absent[0] in out.reads:
            out.reads[name] = out.reads[absent[0]]
        return

    variables = {"args": call.arguments, "facts": {d: out.values[d] for d in deps}, "principal": principal}
    keys: dict[str, Any] = {}
    for argument, expression in source.match.items():
        try:
            keys[argument] = _compiled(expression).evaluate(variables)
        except CelError as exc:
            out.missing[name] = f"cannot tell which {source.tool} result is the {name}: {exc}"
            return
    out.keys[name] = keys

    if resolver is not None:
        out.resolver_reads += 1
        try:
            value = resolver.resolve(name, source, dict(keys))
        except Exception as exc:  # an integrator's failure must not become a fact
            out.missing[name] = f"re-reading the {name} failed ({type(exc).__name__}: {exc})"
            return
        if value is not None:
            out.values[name] = value
            return

    value = None
    newest = -1
    for tool in (source.tool, *source.refreshed_by):
        for result in successful_results(trajectory, tool, keys):
            parsed = result.json()
            if parsed is not None and result.index > newest:
                value, newest = parsed, result.index  # the newest read or write result wins
    if value is None:
        read = format_read(source.tool, keys)
        out.reads[name] = read
        out.missing[name] = f"call {read} first"
        return
    out.values[name] = value


def resolve_principal(checklist: Checklist, trajectory: HasToolResults, context_principal: str | None) -> str | None:
    """The authenticated user: the integrator's value, else the checklist's PrincipalSource, else None."""
    if context_principal is not None:
        return context_principal
    source = checklist.principal
    if source is None:
        return None
    for result in successful_results(trajectory, source.tool):
        parsed = result.json()
        if not isinstance(parsed, dict):
            continue
        value = parsed.get(source.field)
        return value if isinstance(value, str) and value else None
    return None


@lru_cache(maxsize=1024)
def _compiled(expression: str) -> CheckProgram:
    return compile_check(expression)
