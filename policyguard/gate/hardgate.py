"""The deterministic hard gate: prove what CEL checks over trusted facts can prove.

For a mutating call the gate evaluates every requirement that has a ``check``
(the tool's own and the general rules) against the call's ``args``, trusted
``facts`` (:mod:`policyguard.gate.facts`), the ``principal`` and ``now``:

* the pending call's arguments break :mod:`policyguard.trajectory.limits`, two calls share
  an id, one call has two results, or an earlier different call used the pending
  call's id -> BLOCK naming the problem (never paired by position);
* a needed fact is missing, a check reads an absent ``principal``, or a data
  requirement's prerequisite read was never made -> BLOCK saying why and which
  read to make; a check that is true with the missing fact absent, in a form
  where that proves it true for any value of the fact, is MET without it
  (:mod:`policyguard.gate.absent`);
* a check is false -> BLOCK naming the requirement (deny wins: one failing check
  blocks whatever the others say);
* a check cannot be evaluated (missing key, type error, non-bool) -> BLOCK with
  stage ``gate_error`` (fail closed);
* the checks' estimated cost on the call's values is over the decision's budget
  (:mod:`policyguard.gate.celcost`) -> BLOCK naming the check, before evaluating it;
* otherwise the checked requirements are MET and the rest UNVERIFIED, and the
  gate escalates so the verifier judges what only a reader of the dialogue can.

Read-only tools pass at once (stage ``read_only``); a tool the checklist does not
name is judged as mutating here (the :class:`~policyguard.guard.core.Guard` blocks it
before the gate unless the integrator opts in with ``unknown_tools="check"``).
The gate holds only compiled programs and never mutates them, so one instance
may serve many threads (its per-tool caches only ever gain entries, at most 1,024
tool names). The CEL engine gets only the fact fields the tool's checks can read
(:mod:`policyguard.gate.factpaths`). Cost: ``benchmarks/bench_gate_replay.py`` times it
on the airline replay's 397 decisions against the bare CEL programs.
"""

from __future__ import annotations

from typing import Any, Literal

from policyguard.checklist.schema import Checklist, Requirement
from policyguard.decision import Decision, RequirementResult, Status
from policyguard.errors import ChecklistError
from policyguard.stages import PAIRED_VIEW, CheckContext
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.limits import call_problem
from policyguard.trajectory.messages import (
    DuplicateCallId,
    HasToolResults,
    ToolCall,
    ToolResult,
    ToolResultsView,
    Trajectory,
)

from .absent import decidable_without_absent
from .cel import (
    CHECK_VARIABLES,
    Activation,
    CelBudgetError,
    CelCompileError,
    CelEvalError,
    CheckProgram,
    Roots,
    compile_check,
    union_hoists,
    union_roots,
)
from .celhoist import Hoist
from .factpaths import Trie, paths_trie, prune_facts, read_paths
from .facts import (
    FactsResult,
    StateResolver,
    fact_closure,
    format_read,
    principal_missing,
    resolve_facts,
    resolve_principal,
)
from .wording import not_met_message, read_first_message

JudgedBy = Literal["gate", "verifier", "none"]
_CACHED_TOOLS = 1024
MATCH_VARIABLES: frozenset[str] = frozenset({"args", "facts", "principal"})
INVALIDATION_VARIABLES: frozenset[str] = frozenset({"write", "args", "record", "facts"})


def _requirement_paths(checklist: Checklist) -> list[tuple[tuple[str | int, ...], Requirement]]:
    paths: list[tuple[tuple[str | int, ...], Requirement]] = []
    for tool_key, spec in checklist.tools.items():
        for index, req in enumerate(spec.requirements):
            paths.append((("tools", tool_key, "requirements", index), req))
    for index, req in enumerate(checklist.general_rules):
        paths.append((("general_rules", index), req))
    return paths


def _compile_at(
    checklist: Checklist,
    expression: str,
    path: tuple[str | int, ...],
    subject: str,
    invalid: str,
    allowed: frozenset[str],
    errors: list[ChecklistError],
) -> CheckProgram | None:
    """One expression compiled, with every problem (syntax, unknown variables, undeclared facts) at its line."""
    try:
        program = compile_check(expression)
    except CelCompileError as exc:
        errors.append(checklist.error_at(f"{invalid}: {exc}", path))
        return None
    unknown = program.variables() - allowed
    if unknown:
        message = f"{subject} uses unknown variable(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
        errors.append(checklist.error_at(message, path))
    for dep in sorted(program.fact_names() - set(checklist.facts)):
        errors.append(checklist.error_at(f"{subject} refers to undeclared fact {dep!r}", path))
    return program


def _compile_all(checklist: Checklist) -> tuple[dict[str, CheckProgram], list[ChecklistError]]:
    programs: dict[str, CheckProgram] = {}
    errors: list[ChecklistError] = []
    for name, source in checklist.facts.items():
        match = f"match of fact {name!r}"
        for argument, expression in source.match.items():
            path: tuple[str | int, ...] = ("facts", name, "match", argument)
            _compile_at(checklist, expression, path, match, f"invalid CEL in {match}", MATCH_VARIABLES, errors)
        if source.invalidated_when is not None:
            path = ("facts", name, "invalidated_when")
            subject = f"invalidated_when of fact {name!r}"
            _compile_at(
                checklist, source.invalidated_when, path, subject, f"invalid CEL in {subject}",
                INVALIDATION_VARIABLES, errors,
            )  # fmt: skip
    for base, req in _requirement_paths(checklist):
        if req.check is None:
            continue
        path = (*base, "check")
        subject = f"check of requirement {req.id!r}"
        invalid = f"invalid CEL check in requirement {req.id!r}"
        program = _compile_at(checklist, req.check, path, subject, invalid, CHECK_VARIABLES, errors)
        if program is None:
            continue
        previous = programs.get(req.id)
        if previous is not None and previous.source != program.source:
            errors.append(checklist.error_at(f"duplicate requirement id {req.id!r} with a different check", path))
        programs[req.id] = program
    return programs, errors


def compile_checklist_checks(checklist: Checklist) -> list[ChecklistError]:
    """Every problem with the checklist's CEL (checks and fact matches), each with file and line."""
    return _compile_all(checklist)[1]


class HardGate:
    """The deterministic gate; implements :class:`policyguard.stages.Gate`."""

    def __init__(self, checklist: Checklist, resolver: StateResolver | None = None) -> None:
        programs, errors = _compile_all(checklist)
        if errors:
            raise errors[0]
        self._checklist = checklist
        self._resolver = resolver
        self._programs = programs
        self._reads_principal = {rid for rid, program in programs.items() if "principal" in program.variables()}
        self._tries: dict[str, Trie | None] = {}
        self._wides: dict[str, tuple[Roots, frozenset[Hoist]]] = {}
        self._plans: dict[str, tuple[bool, list[Requirement]]] = {}
        self._fact_lists: dict[str, list[str]] = {}
        self._closures: dict[str, list[str]] = {}
        self._decidable: dict[str, bool] = {}

    @property
    def checklist(self) -> Checklist:
        return self._checklist

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        """Allow a read-only call, block on a missing fact or a failing check, else escalate."""
        known = context.extra.get("args_sha256")  # the guard hashed this call's arguments already
        sha = known if isinstance(known, str) and known != UNHASHABLE_ARGS else call.args_sha256_or_none()
        base: dict[str, Any] = {"call_id": call.id, "tool": call.name, "args_sha256": sha}
        checklist = self._checklist
        mutating, requirements = self._plan(call.name)
        if not mutating:
            return Decision.allow(stage="read_only", **base)

        problem = call_problem(call.arguments)  # the CEL engine converts args recursively: bound it first
        if problem is not None:
            return Decision.block(
                stage="gate",
                message=f"This call cannot be checked, so it is blocked: its {problem}. Send plain, small arguments.",
                error=problem,
                **base,
            )
        try:
            paired = context.extra.get(PAIRED_VIEW)
            if getattr(trajectory, "paired", False):  # a session's record: paired as it grew, pending id checked
                view: Any = trajectory
            else:
                if paired is not None and paired[0] is trajectory:  # the front paired this very dialogue
                    view = paired[1]
                else:
                    view = ToolResultsView(trajectory)  # scanned several times below: list it once
                site = view.unanswered(call.id)
                if site is not None and (site.call.name, site.call.arguments) != (call.name, call.arguments):
                    raise DuplicateCallId(call.id, "is used by an earlier, different call that is not answered")
        except DuplicateCallId as exc:
            return Decision.block(
                stage="gate",
                message=f"This action is blocked: {exc}. Give every tool call its own id and answer each once.",
                error=str(exc),
                **base,
            )
        principal = resolve_principal(checklist, view, context.principal)
        needed: set[str] = set()
        for req in requirements:
            if req.check is not None:
                needed |= self._programs[req.id].fact_names()
        try:
            facts = resolve_facts(checklist, call, view, needed, self._resolver, principal=principal)
        except Exception as exc:  # fail closed on anything unexpected
            return Decision.block(
                stage="gate_error",
                message="The policy gate could not read the facts it needs, so this action is blocked. "
                "Do not retry it until the problem is fixed; tell the user or ask a human.",
                error=f"{type(exc).__name__}: {exc}",
                **base,
            )

        successes: dict[str, list[ToolResult]] = view.successes_by_tool()  # non-error results by tool
        results: list[RequirementResult] = []
        denials: list[str] = []
        errors: list[str] = []
        trie = self._read_trie(call.name, requirements)
        cel_facts = facts.values if trie is None else prune_facts(facts.values, trie)
        wide, hoists = self._wide_roots(call.name, requirements)
        variables = Activation(
            {"args": call.arguments, "facts": cel_facts, "principal": principal, "now": context.now},
            wide=wide,
            hoists=hoists,
        )
        for req in requirements:
            if req.check is None:
                results.append(_result(req.id, "UNVERIFIED", "no deterministic check", judged_by="none"))
                continue
            program = self._programs[req.id]
            absent = [fact for fact in self._sorted_facts(req.id, program) if fact in facts.missing]
            spared = absent if absent and self._holds_without(req.id, program, variables) else []
            blocked = self._missing_reads(req, program, call, view, facts, principal, successes, frozenset(spared))
            if blocked is not None:
                evidence, message = blocked
                results.append(_result(req.id, "NOT_MET", evidence))
                denials.append(message)
                continue
            if spared:  # true whatever the absent facts hold: see policyguard.gate.absent
                results.append(_result(req.id, "MET", f"check holds without the {', '.join(spared)}: {req.check}"))
                continue
            try:
                holds = program.holds(variables)
            except CelBudgetError as exc:  # too costly to evaluate: a denial, since a smaller call would be checked
                results.append(_result(req.id, "NOT_MET", f"check not evaluated (fail closed): {exc}"))
                denials.append(
                    f"This call is too large for the policy check {req.id} to evaluate, so it is blocked. "
                    "Send a call with fewer or smaller items."
                )
                errors.append(f"{req.id}: {exc}")
                continue
            except CelEvalError as exc:
                results.append(_result(req.id, "NOT_MET", f"check could not be evaluated (fail closed): {exc}"))
                errors.append(f"{req.id}: {exc}")
                continue
            if holds:
                results.append(_result(req.id, "MET", f"check holds: {req.check}"))
            elif req.read_first is not None:  # the evidence is missing, not contrary: ask for the read
                results.append(_result(req.id, "NOT_MET", f"prerequisite read not made: {req.read_first}"))
                denials.append(read_first_message(req.id, req.read_first, call.name))
            else:
                results.append(_result(req.id, "NOT_MET", f"check is false: {req.check}"))
                denials.append(not_met_message(req.id, req.text))

        fields: dict[str, Any] = {**base, "requirements": results, "resolver_reads": facts.resolver_reads}
        if denials:
            error = "; ".join(errors) if errors else None
            return Decision.block(stage="gate", message=" ".join(_unique(denials)), error=error, **fields)
        if errors:
            return Decision.block(
                stage="gate_error",
                message="A policy check for this action could not be evaluated, so it is blocked. "
                "Make sure the call has all its arguments and the records it depends on were read; "
                "if it still fails, do not retry and ask a human.",
                error="; ".join(errors),
                **fields,
            )
        return Decision.escalate(stage="gate", **fields)

    def _plan(self, tool: str) -> tuple[bool, list[Requirement]]:
        """Whether the tool is judged as mutating, and its requirements (cached for up to ``_CACHED_TOOLS`` names)."""
        plan = self._plans.get(tool)
        if plan is None:
            plan = (self._checklist.is_mutating(tool), self._checklist.requirements_for(tool))
            if len(self._plans) < _CACHED_TOOLS:  # unknown names are the caller's to choose: never grow without bound
                self._plans[tool] = plan
        return plan

    def _read_trie(self, tool: str, requirements: list[Requirement]) -> Trie | None:
        """The parts of the facts the tool's checks can read (None: all of them), computed once per tool."""
        if tool in self._tries:
            return self._tries[tool]
        paths = [read_paths(self._programs[r.id].source) for r in requirements if r.check is not None]
        trie = None if any(p is None for p in paths) else paths_trie(p for p in paths if p is not None)
        if len(self._tries) < _CACHED_TOOLS:
            self._tries[tool] = trie
        return trie

    def _wide_roots(self, tool: str, requirements: list[Requirement]) -> tuple[Roots, frozenset[Hoist]]:
        """The keys of args and facts the tool's checks read, and the paths they read as variables
        (:mod:`.celhoist`): their shared contexts (computed once per tool)."""
        found = self._wides.get(tool)
        if found is None:
            programs = [self._programs[r.id] for r in requirements if r.check is not None]
            found = (union_roots(programs), union_hoists(programs))
            if len(self._wides) < _CACHED_TOOLS:
                self._wides[tool] = found
        return found

    def _holds_without(self, rid: str, program: CheckProgram, variables: Activation) -> bool:
        """Whether the check is exactly true with the missing facts absent, where that proves it for any value."""
        decidable = self._decidable.get(rid)
        if decidable is None:
            decidable = self._decidable[rid] = decidable_without_absent(program.source)
        if not decidable:
            return False
        try:
            return program.holds(variables) is True
        except CelEvalError:  # the check needs an absent fact (or fails anyway): ask for the read as before
            return False

    def _sorted_facts(self, rid: str, program: CheckProgram) -> list[str]:
        found = self._fact_lists.get(rid)
        if found is None:
            found = self._fact_lists[rid] = sorted(program.fact_names())
        return found

    def _closure(self, rid: str, program: CheckProgram) -> list[str]:
        """The facts the check reads and those they are found through, sorted (computed once per requirement)."""
        found = self._closures.get(rid)
        if found is None:
            found = self._closures[rid] = sorted(fact_closure(self._checklist, program.fact_names()))
        return found

    def _missing_reads(
        self,
        req: Requirement,
        program: CheckProgram,
        call: ToolCall,
        trajectory: HasToolResults,
        facts: FactsResult,
        principal: str | None,
        successes: dict[str, list[ToolResult]],
        spared: frozenset[str] = frozenset(),
    ) -> tuple[str, str] | None:
        """(evidence, remediation) when a fact, the principal or a prerequisite read is missing, else None.

        ``spared`` are absent facts the check was proven not to need: neither they nor a
        prerequisite read that only they come from are asked for.
        """
        if principal is None and req.id in self._reads_principal:
            reason = principal_missing(self._checklist, trajectory)
            return f"missing principal: {reason}", f"No user is authenticated, so this action is blocked: {reason}."
        for fact in self._sorted_facts(req.id, program):
            if fact in facts.missing and fact not in spared:
                read = facts.reads.get(fact)
                if read is not None and fact in facts.never_read:
                    message = f"Read the {fact} first: call {read} before {call.name}."
                else:
                    message = f"The {fact} needed to check this action is not available: {facts.missing[fact]}."
                return f"missing fact {fact!r}: {facts.missing[fact]}", message
        if req.kind != "data":
            return None
        closure = self._closure(req.id, program)
        for tool in req.prerequisites:
            sources = self._checklist.facts
            keyed = [
                (facts.keys[f], (tool, *sources[f].also, *sources[f].refreshed_by))
                for f in closure
                if sources[f].tool == tool and f in facts.keys and f not in spared
            ]
            if not keyed and any(sources[f].tool == tool for f in spared):
                continue  # the read would only give facts the check does not need
            if keyed:
                for keys, readers in keyed:  # a write that returns the record read it too
                    if not any(_answers(result, keys) for r in readers for result in successes.get(r, ())):
                        read = format_read(tool, keys)
                        return (
                            f"prerequisite read not made: {read}",
                            f"Read first: call {read} before {call.name}.",
                        )
            elif not successes.get(tool):
                return f"prerequisite read not made: {tool}", f"Read first: call {tool} before {call.name}."
        return None


def _answers(result: ToolResult, keys: dict[str, Any]) -> bool:
    """Whether the result's call was made with these arguments (as :func:`.facts.successful_results`)."""
    arguments = result.call.arguments
    return all(name in arguments and arguments[name] == value for name, value in keys.items())


def _result(rid: str, status: Status, evidence: str, *, judged_by: JudgedBy = "gate") -> RequirementResult:
    return RequirementResult(id=rid, status=status, evidence=evidence, judged_by=judged_by)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
