"""Trusted facts and the principal: what a check may believe, and why.

A check reads ``facts.X``; the checklist's :class:`~policyguard.checklist.schema.FactSource`
says fact X comes from read tool ``source.tool`` (and ``source.also``) called
with the *keys*: arguments computed by ``source.match`` (CEL over the pending
call's ``args``, the trusted ``principal`` and facts resolved before X). Only
calls made before the pending call count, and they are ORDERED BY CALL (the
assistant message and the call's position in it), never by where a result was
appended: a re-read called before a write is not newer than the write even if
its result arrives after it. Calls of one message may run concurrently, so a read
issued in the same message as a write that changes its record, before or after
it, counts as the state before that write (:func:`in_effect_order`).

``collect: newest`` (the default) - the fact is a record:

1. the integrator's :class:`StateResolver`, which re-reads state at execution
   time - fresher than anything in the dialogue, so it wins;
2. otherwise the record returned by the newest call (whose arguments equal the
   keys) of the read tool or of a ``refreshed_by`` write:

   * the result must be non-error, strict JSON within :mod:`policyguard.trajectory.limits`
     (size, depth, finite numbers) and BOUND to the keys: by default, for each
     match argument NAME the record's field NAME equals the key (``bind``
     renames the field or, as ``{}``, turns binding off). A read of T1QOBS
     that returned NO6JO3's record is not the reservation T1QOBS;
   * a failed or unreadable READ changes nothing, so an older good read stands;
     a ``refreshed_by`` WRITE whose result cannot be read as the bound record
     (error, plain text, no result yet, another record) may have changed it, so
     the fact is missing until it is read again (fail closed);
   * an ``invalidated_by`` call made after that record was read, whose
     arguments agree with the keys on every key name they share (or share
     none), makes the fact missing (``book_reservation`` spends a certificate in
     the user's profile without returning it).

``collect: all`` - the list of every successful readable result of
``tool``/``also`` whose arguments match the keys, in call order (never missing).
``collect: calls`` - one ``{"args", "result", "error"}`` entry per earlier call
of ``tool``/``also`` whose arguments match, answered or not (never missing).

Never from user or assistant text: a user who says "my order total is 999" has
stated nothing the gate believes. A fact that cannot be found is *missing*, with
a reason that says why (no read yet, read failed, result not JSON, over a limit,
record for another key, changed by a later write) and which read to make; the
gate blocks on it, so an agent is not left re-making a read it already made.

The principal (the authenticated user) is the integrator's
``CheckContext.principal`` when given; else the checklist's
:class:`~policyguard.checklist.schema.PrincipalSource` - the non-empty string ``field``
of the first (in call order) successful, readable lookup result; a lookup called
with an argument named ``field`` counts only if the record's ``field`` equals it.
That is a tool result answering the agent's own call, so it is trusted; a user
typing "I am user X" is not, and neither is a read the guard fetched itself
(:data:`FETCH_ID_PREFIX`): it is a fact about a record, never about who the
user is. The FIRST lookup counts so a later lookup of someone
else cannot switch whose account is acted on. An ABSENT principal equals nothing:
a fact matched on it, or a check that reads it, is missing ("authenticate the
user first") and the gate blocks.

A trajectory in which two calls share an id, or one call has two results, is
refused (:class:`~policyguard.trajectory.messages.DuplicateCallId`), never paired by position.

Each distinct result text is parsed once (:func:`read_result`, a bounded cache
keyed by the exact text); the values it returns are shared and never mutated.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from policyguard.checklist.schema import Checklist, FactSource, PrincipalSource, StatedPrincipal
from policyguard.trajectory.limits import call_problem, value_problem
from policyguard.trajectory.messages import CallSite, HasToolResults, ToolCall, ToolResult, parse_result_text
from policyguard.trajectory.words import user_words

from .cel import CelError, CheckProgram, compile_check

FETCH_ID_PREFIX = "policyguard-fetch:"
"""The id prefix of a read the guard made itself (:mod:`.fetch`). Such a read is a fact about a record and
never evidence of who the user is: the principal lookups skip it (a host call with such an id only loses
its power to authenticate, which is stricter)."""


def is_fetched(call: ToolCall) -> bool:
    """Whether ``call`` is a read the guard made itself (its id starts with :data:`FETCH_ID_PREFIX`)."""
    return call.id.startswith(FETCH_ID_PREFIX)


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
    never_read: set[str] = field(default_factory=set)


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
    if source.invalidated_when is not None:
        deps |= _compiled(source.invalidated_when).fact_names()
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
    sites = calls_before(trajectory, call)
    for name in sorted(needed):
        _resolve_one(name, checklist, call, sites, resolver, principal, out, in_progress=set())
    return out


def calls_before(trajectory: HasToolResults, call: ToolCall) -> list[CallSite]:
    """The trajectory's calls made before ``call`` (all of them when ``call`` is not in it yet).

    Only the pending call itself cuts the history: the newest unanswered call
    with its id, tool and arguments. An earlier call that used the same id and
    was answered is another call and stays in the history.
    """
    sites = trajectory.call_sites()
    if getattr(trajectory, "excludes_pending", False):  # a session's record: the pending call is not in it
        return sites
    for position in range(len(sites) - 1, -1, -1):
        site = sites[position]
        if site.call.id != call.id:
            continue
        if site.result is None and site.call.name == call.name and site.call.arguments == call.arguments:
            return sites[:position]
        break
    return sites


def principal_missing(checklist: Checklist, trajectory: HasToolResults | None = None) -> str:
    """Why a check that reads an absent principal cannot be judged, and what to do.

    When the lookup was made, the reason names what was wrong with its newest
    result (failed, not JSON, no user id, another user's record), so an agent
    does not repeat a lookup that cannot authenticate anyone.
    """
    source = checklist.principal
    if source is None:
        return "authenticate the user first: no user is authenticated and the checklist names no lookup"
    why = ""
    if trajectory is not None:
        lookups = {source.tool, *source.lookups}
        tried = [
            _principal_of(site, source)[1]
            for site in trajectory.call_sites()
            if site.call.name in lookups and not is_fetched(site.call)
        ]
        if tried:
            why = f" (the last {source.tool} call did not authenticate anyone: {tried[-1]})"
    return (
        f"authenticate the user first: call {source.tool}({source.field}=...) for the user's own account "
        f"and get a successful result{why}"
    )


def _principal_of(site: CallSite, source: PrincipalSource) -> tuple[str | None, str]:
    """The user id one lookup authenticates, or None and why it authenticates nobody."""
    result = site.result
    if result is None:
        return None, "it has no result yet"
    if result.is_error:
        return None, "it failed"
    if site.call.name in source.lookups and site.call.name != source.tool:
        return _bare_id(result)
    parsed, problem = read_result(result)
    if problem is not None:
        return None, f"its result is {problem}"
    value = parsed.get(source.field) if isinstance(parsed, dict) else None
    if not isinstance(value, str) or not value:
        return None, f"its result has no {source.field!r}"
    if site.call.arguments.get(source.field, value) != value:
        return None, "it returned another user's record"
    return value, ""


def _bare_id(result: ToolResult) -> tuple[str | None, str]:
    """The id a lookup answered with: its text (or a JSON string), one word of printable characters."""
    parsed, problem = read_result(result)
    text = parsed if problem is None else result.content.strip()
    if not isinstance(text, str) or not text or len(text) > 200 or not text.isprintable() or " " in text:
        return None, "its result is not a user id"
    return text, ""


def _stated_principal(site: CallSite, stated: StatedPrincipal, said: dict[str, int]) -> str | None:
    """The record's user id when the user wrote it, as a whole word, before the read was made."""
    result = site.result
    if result is None or result.is_error:
        return None
    parsed, problem = read_result(result)
    value = parsed.get(stated.field) if problem is None and isinstance(parsed, dict) else None
    if not isinstance(value, str) or not value:
        return None
    first = said.get(value)
    return value if first is not None and first < site.order[0] else None


def words_said(trajectory: object) -> dict[str, int]:
    """Each word of the user's messages (a run of letters, digits, ``_.@-``; a final ``.`` dropped) -> the
    index of the first user message that has it. One pass, so a long dialogue costs no more per read."""
    said = getattr(trajectory, "said_words", None)
    if said is not None:  # a session record keeps its own index (user messages numbered like its calls)
        return said()  # type: ignore[no-any-return]
    first: dict[str, int] = {}
    for index, message in enumerate(getattr(trajectory, "messages", None) or ()):
        if message.role == "user" and message.content:
            for word in user_words(message.content):
                first.setdefault(word, index)
    return first


def _resolve_one(
    name: str,
    checklist: Checklist,
    call: ToolCall,
    sites: list[CallSite],
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
        _resolve_one(dep, checklist, call, sites, resolver, principal, out, in_progress)
    absent = sorted(dep for dep in deps if dep in out.missing)
    if absent:
        out.missing[name] = f"{out.missing[absent[0]]} (the {name} is found through the {absent[0]})"
        if absent[0] in out.reads:
            out.reads[name] = out.reads[absent[0]]
        if absent[0] in out.never_read:
            out.never_read.add(name)
        return

    if principal is None and any("principal" in _compiled(e).variables() for e in source.match.values()):
        out.missing[name] = principal_missing(checklist)
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

    if source.collect == "calls":
        entries = _collect_calls(source, keys, sites)
        if isinstance(entries, str):
            out.missing[name] = entries
            return
        out.values[name] = entries
        return
    if source.collect == "all":
        out.values[name] = _collect_all(source, keys, sites)
        return

    if resolver is not None:
        out.resolver_reads += 1
        try:
            value = resolver.resolve(name, source, copy.deepcopy(keys))  # keys may hold shared parsed values
        except Exception as exc:  # an integrator's failure must not become a fact
            out.missing[name] = f"re-reading the {name} failed ({type(exc).__name__}: {exc})"
            return
        if value is not None:
            problem = value_problem(value)
            if problem is not None:
                out.missing[name] = f"the re-read {name} is over a limit ({problem})"
                return
            out.values[name] = value
            return

    found = _newest(name, source, keys, sites, {"args": call.arguments, "facts": variables["facts"]})
    if isinstance(found, Missing):
        read = format_read(source.tool, keys)
        out.reads[name] = read
        out.missing[name] = found.reason.replace("{read}", read)
        if found.never_read:
            out.never_read.add(name)
        return
    out.values[name] = found


@dataclass(frozen=True)
class Missing:
    """Why a newest fact is missing; ``reason`` may name ``{read}``, the read to make."""

    reason: str
    never_read: bool = False


def _args_match(call: ToolCall, keys: dict[str, Any]) -> bool:
    arguments = call.arguments
    return all(name in arguments and _same(arguments[name], value) for name, value in keys.items())


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps types apart where Python would not (True != 1, "1" != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _field(record: Any, path: str) -> tuple[bool, Any]:
    value = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def bound_record(source: FactSource, keys: dict[str, Any], value: Any) -> bool:
    """True when ``value`` is the record the keys ask for (see ``FactSource.bind``)."""
    binding = source.bind if source.bind is not None else {name: name for name in keys}
    for argument, path in binding.items():
        if argument not in keys:
            continue  # validated at load; a key match did not compute cannot be checked
        present, field_value = _field(value, path)
        if not present or not _same(field_value, keys[argument]):
            return False
    return True


def _readable(source: FactSource, keys: dict[str, Any], site: CallSite) -> tuple[Any, str | None]:
    """(record, None) when the call's result is the fact's record, else (None, why not)."""
    tool, result = site.call.name, site.result
    if result is None:
        return None, f"the {tool} call has no result yet"
    if result.is_error:
        return None, f"the {tool} call failed ({_clip(result.content)})"
    value, problem = read_fact_result(source, result)
    if problem is not None:
        return None, f"the {tool} result is {problem}"
    if not bound_record(source, keys, value):
        return None, f"the {tool} result is for another record"
    return value, None


def _newest(name: str, source: FactSource, keys: dict[str, Any], sites: list[CallSite], pending: dict[str, Any]) -> Any:
    """The fact's record, or why it is missing; ``pending`` holds the pending call's ``args`` and the
    facts this one depends on, for ``invalidated_when``."""
    reads = {source.tool, *source.also}
    writes = set(source.refreshed_by) - reads
    invalid = set(source.invalidated_by)
    value: Any = None
    found = False
    why: str | None = None
    newer: list[CallSite] = []  # the sites after the one found, in effect order, newest first
    for site in newest_first(sites, reads, writes | invalid):  # stops at the newest usable read, however long
        tool = site.call.name
        if (
            (tool in reads or tool in writes)
            and _args_match(site.call, keys)
            and not (tool in writes and source.failed_writes_change_nothing and _failed(site))
        ):  # a write the tool refused (failed_writes_change_nothing) changed nothing
            record, problem = _readable(source, keys, site)
            if problem is None:
                value, found = record, True
                break
            if tool in writes:
                return Missing(
                    f"{tool} changed the {name} after it was read and its result cannot be read as the {name} "
                    f"({problem}): call {{read}} again"
                )
            if not keys:  # an unkeyed fact is whatever the newest read returned: an older read is another record
                return Missing(f"the newest {tool} read cannot be used ({problem}): call {{read}} successfully")
            if site.result is None and why is None:
                # The newest read of this record is not answered yet (a sibling of the pending call, run beside
                # it): what it returns will be the record as it was then, so an older read is not the state to
                # judge on.
                return Missing(
                    f"the newest {tool} read of the {name} has no result yet: wait for it, or call {{read}} again"
                )
            if why is None:
                why = problem
        newer.append(site)
    if not found:
        if why is None:
            return Missing("call {read} first", never_read=True)
        return Missing(f"{why}: call {{read}} (a successful read of this record) first")
    for site in reversed(newer) if invalid else ():  # in effect order: only later ones
        if site.call.name not in invalid:
            continue
        if source.failed_writes_change_nothing and _failed(site):
            continue
        if _agrees(site.call.arguments, keys) and _invalidates(source, site.call.arguments, pending, value):
            return Missing(f"{site.call.name} changed the {name} after it was read: call {{read}} again")
    return value


def in_effect_order(sites: list[CallSite], reads: set[str], changers: set[str]) -> list[CallSite]:
    """The calls of ``reads`` and ``changers`` in the order their effects are known to have happened.

    Calls of one assistant message may run concurrently (LangChain's tool node
    and the Agents SDK do), and their results may come back in any order, so a
    read issued in the same message as a write that changes the record - before
    or after it in the message - may show the record from before that write. It
    is placed before every changer of its message: never taken as the state after
    one, and a rule that needs that state asks for the record to be read again.
    Sites arrive in call order (message, position); the sort is stable.
    """
    relevant = [site for site in sites if site.call.name in reads or site.call.name in changers]
    if changers and len(relevant) > 1:
        relevant.sort(key=lambda site: (site.order[0], site.call.name in changers and site.call.name not in reads))
    return relevant


def newest_first(sites: list[CallSite], reads: set[str], changers: set[str]) -> Iterator[CallSite]:
    """:func:`in_effect_order` backwards, made lazily from the end of ``sites`` (in call order): a reader
    that stops at the newest record it can use reads only the messages after it, not the whole history."""
    index = len(sites) - 1
    while index >= 0:
        message = sites[index].order[0]
        group_reads: list[CallSite] = []
        group_changers: list[CallSite] = []
        while index >= 0 and sites[index].order[0] == message:
            site = sites[index]
            name = site.call.name
            if name in reads:
                group_reads.append(site)
            elif name in changers:
                group_changers.append(site)
            index -= 1
        yield from group_changers  # a message's changers count after its reads (see in_effect_order)
        yield from group_reads


def _failed(site: CallSite) -> bool:
    """A call answered with an error (``failed_writes_change_nothing``: the tool refused it)."""
    return site.result is not None and site.result.is_error


def _invalidates(source: FactSource, write: dict[str, Any], pending: dict[str, Any], record: Any) -> bool:
    """Whether ``write`` may have changed what the pending call relies on (``invalidated_when``; fail closed)."""
    if source.invalidated_when is None:
        return True
    try:
        return _compiled(source.invalidated_when).holds({**pending, "write": write, "record": record})
    except CelError:
        return True


def _agrees(arguments: dict[str, Any], keys: dict[str, Any]) -> bool:
    return all(_same(arguments[k], v) for k, v in keys.items() if k in arguments)


def _collect_all(source: FactSource, keys: dict[str, Any], sites: list[CallSite]) -> list[Any]:
    tools = {source.tool, *source.also}
    values: list[Any] = []
    for site in sites:
        result = site.result
        if site.call.name not in tools or result is None or result.is_error or not _args_match(site.call, keys):
            continue
        value, problem = read_fact_result(source, result)
        if problem is None:
            values.append(value)
    return values


def _collect_calls(source: FactSource, keys: dict[str, Any], sites: list[CallSite]) -> list[dict[str, Any]] | str:
    """The call entries, or why they cannot be checked (an earlier call's arguments break a limit)."""
    tools = {source.tool, *source.also}
    entries: list[dict[str, Any]] = []
    for site in sites:
        if site.call.name not in tools or not _args_match(site.call, keys):
            continue
        problem = call_problem(site.call.arguments)
        if problem is not None:
            return f"an earlier {site.call.name} call cannot be checked: its {problem}"
        result = site.result
        parsed = None
        if result is not None and not result.is_error:
            parsed = read_fact_result(source, result)[0]
        entries.append(
            {"args": dict(site.call.arguments), "result": parsed, "error": result is not None and result.is_error}
        )
    return entries


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split()[:40])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_principal(checklist: Checklist, trajectory: HasToolResults, context_principal: str | None) -> str | None:
    """The authenticated user: the integrator's value, else the checklist's PrincipalSource, else None.

    The principal is the ``field`` of the FIRST (in call order) successful,
    readable lookup result - when the lookup was called with an argument named
    ``field``, only a record whose ``field`` equals it counts (a lookup of X
    that returned Y's profile authenticates nobody). Errors, text and records
    without a non-empty string ``field`` are skipped; none -> None, and a check
    that reads ``principal`` then blocks as a missing fact.
    """
    if context_principal is not None:
        return context_principal
    source = checklist.principal
    if source is None:
        return None
    lookups = {source.tool, *source.lookups}
    said: dict[str, int] | None = None
    for site in trajectory.call_sites():
        if is_fetched(site.call):
            continue  # a read the guard made itself never authenticates anyone
        if site.call.name in lookups:
            value, _ = _principal_of(site, source)
            if value is not None:
                return value
        if source.stated is not None and site.call.name == source.stated.tool:
            if said is None:
                said = words_said(trajectory)
            value = _stated_principal(site, source.stated, said)
            if value is not None:
                return value
    return None


@lru_cache(maxsize=1024)
def _compiled(expression: str) -> CheckProgram:
    return compile_check(expression)


PARSE_CACHE_CHARS = 4_000_000
PARSE_CACHE_MAX_CHARS = 64_000


SCALAR_MAX_CHARS = 1_000


def read_fact_result(source: FactSource, result: ToolResult) -> tuple[Any, str | None]:
    """:func:`read_result`; for a ``scalar`` source a text that is not JSON is the (stripped) string itself."""
    value, problem = read_result(result)
    if problem == "not JSON" and source.scalar:
        text = result.content.strip()
        if not text:
            return None, "empty"
        if len(text) > SCALAR_MAX_CHARS:
            return None, f"over a limit (a bare value of more than {SCALAR_MAX_CHARS} characters)"
        return text, None
    return value, problem


def read_result(result: ToolResult) -> tuple[Any, str | None]:
    """``result.json_problem()``, parsed once per distinct text and shared: callers must not mutate the value.

    Every decision re-reads the results of a growing dialogue, and parsing plus
    the limit walk was a third of the gate's time. The cache is keyed by the
    result's exact text, so only an identical text can reuse a parse (a pure
    function of it). It holds texts of at most ``PARSE_CACHE_MAX_CHARS`` and at
    most ``PARSE_CACHE_CHARS`` in all, least recently used dropped first.
    """
    content = result.content
    if len(content) > PARSE_CACHE_MAX_CHARS:
        return parse_result_text(content)
    return _PARSED.get(content)


class _ParseCache:
    """A thread-safe LRU of parsed result texts, bounded by their total length."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._used = 0
        self._entries: OrderedDict[str, tuple[Any, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, content: str) -> tuple[Any, str | None]:
        with self._lock:
            found = self._entries.get(content)
            if found is not None:
                self._entries.move_to_end(content)
                return found
        parsed = parse_result_text(content)
        with self._lock:
            if content not in self._entries:
                self._entries[content] = parsed
                self._used += len(content)
                while self._used > self._budget:
                    dropped, _ = self._entries.popitem(last=False)
                    self._used -= len(dropped)
        return parsed


_PARSED = _ParseCache(PARSE_CACHE_CHARS)
