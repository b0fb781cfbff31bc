"""Validate a checklist against its policy text and the agent's tool schemas.

Loading a checklist (:func:`policyguard.checklist.schema.load_checklist`) stops at the
first error. A person fixing a checklist wants every problem at once, each with
file and line, so :func:`validate_checklist` collects them all.

Errors (``checklist validate`` exits 1):

* schema errors, every one (unknown fields are dropped and validation
  continues, so one stray key does not hide the rest; an unknown field names
  the field it resembles). The schema is strict: ``mutating: "no"``, ``off``
  or ``0``, ``complies: "false"``, a number as ``clock``, ``ceiling: .nan``,
  ``.inf``, zero or negative ceilings and approval thresholds are refused;
* YAML the loader refuses: syntax, duplicate keys, and the size, depth and
  alias limits of :mod:`policyguard.checklist.yamlsource` (an alias bomb is one error);
* when tools are given: every tool named (tool keys, globs, fact ``tool``,
  ``refreshed_by``, ``also`` and ``invalidated_by``, prerequisites, the
  principal source) exists, naming the known tool a misspelled name resembles;
  every ``args.X`` a check or fact match reads is a parameter of that tool;
  effect arguments exist; a tool the tool source marks as writing (tau2
  ``ToolType.WRITE``, ``x-mutating: true``, MCP ``readOnlyHint: false`` or
  ``destructiveHint: true``) is not declared ``mutating: false``, and a fact
  comes from no such tool;
* a tool key or tool name has no whitespace at either end and no non-printable
  character (no agent calls ``"refund "``); a read-only tool (``mutating:
  false``) has no requirements, since the guard never runs them;
* every ``check`` and fact ``match`` compiles and reads only known variables;
* every fact ``fetch`` (the reads the guard may make itself) compiles, reads only
  args, facts and principal, names declared facts, reads a tool that does not
  write, and keys its literal maps by that tool's parameters;
  every ``facts.X`` is declared under ``facts:``; prerequisites are read-only;
* every ``source`` quote occurs in the policy text (after normalizing
  whitespace, markdown emphasis and typographic quotes; ``...`` separates
  fragments that must occur in order) - this catches invented requirements;
* every ``check`` gives each of its own examples the stated result;
* the checklist's policy version is the hash of the given policy text.

Warnings (legal but suspicious; exit 0): no tools given, so tool names were not
checked; a mutating tool without requirements; a check without a complying or a
violating example; a procedural requirement whose text reads like the user's
confirmation but lacks ``confirmation: true``; a tool of the agent the checklist does not cover (the guard
treats it as an unknown tool); a read-only tool the checklist does not declare.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from policyguard.checklist.schema import Checklist, Requirement, ToolSpec, glob_matches, is_glob, schema_error_message
from policyguard.checklist.yamlsource import LocatedYaml, PathKey, load_yaml_file
from policyguard.errors import ChecklistError
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.evidence import reads_like_confirmation

if TYPE_CHECKING:  # pragma: no cover
    from .tools import ToolInfo as LoadedTool

Severity = Literal["error", "warning"]

_ARG_DOT = re.compile(r"(?<![\w.])args\s*\.\s*([A-Za-z_]\w*)")
_ARG_INDEX = re.compile(r"(?<![\w.])args\s*\[\s*(?:\"([^\"]+)\"|'([^']+)')\s*\]")
_HAS_ARG = re.compile(r"\bhas\s*\(\s*args\s*\.\s*([A-Za-z_]\w*)\s*\)")
_MATCH_VARIABLES = frozenset({"args", "facts", "principal"})
_MAP_KEY = re.compile(r"""[{,]\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*:""")  # a literal map key in a fetch


class Problem(BaseModel):
    """One thing wrong with a checklist, pointing at its file, line and field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = None
    line: int | None = None
    field: str | None = None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.file or "<checklist>"
        if self.line is not None:
            where += f":{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.severity}: {self.message}"


@dataclass(frozen=True)
class ToolInfo:
    """What the validator knows about one tool of the agent.

    ``parameters`` is None when the schema does not list them (then argument
    names are not checked). ``mutating`` is None when the source does not say.
    """

    name: str
    parameters: frozenset[str] | None = None
    mutating: bool | None = None
    declared_by: str | None = None


@dataclass(frozen=True)
class ChecklistStats:
    """How many requirements a checklist has and how many the gate can prove."""

    tools: int
    mutating_tools: int
    requirements: int
    data: int
    procedural: int
    with_check: int

    @property
    def check_share(self) -> float:
        return self.with_check / self.requirements if self.requirements else 0.0

    def __str__(self) -> str:
        return (
            f"{self.requirements} requirements ({self.data} data, {self.procedural} procedural) over "
            f"{self.mutating_tools} mutating of {self.tools} tools; {self.with_check} carry a formal check "
            f"({self.check_share:.0%})"
        )


def checklist_stats(checklist: Checklist) -> ChecklistStats:
    """Count requirements (tool requirements plus general rules) and formal checks."""
    reqs = [r for spec in checklist.tools.values() for r in spec.requirements] + list(checklist.general_rules)
    return ChecklistStats(
        tools=len(checklist.tools),
        mutating_tools=sum(1 for spec in checklist.tools.values() if spec.mutating),
        requirements=len(reqs),
        data=sum(1 for r in reqs if r.kind == "data"),
        procedural=sum(1 for r in reqs if r.kind == "procedural"),
        with_check=sum(1 for r in reqs if r.check),
    )


# ---------------------------------------------------------------- tool schemas


def tool_info_from_schema(schema: Mapping[str, Any]) -> ToolInfo:
    """Read one tool schema: OpenAI Chat (``{"type": "function", "function": {...}}``),
    OpenAI Responses (``{"type": "function", "name", "parameters"}``) or Anthropic
    (``{"name", "input_schema"}``), with the same reader the generator uses."""
    from .tools import tool_from_schema

    return _from_loaded(tool_from_schema(dict(schema)))


def tau2_tool_infos(import_path: str) -> list[ToolInfo]:
    """The tools of a tau2 toolkit class, e.g. ``tau2.domains.airline.tools:AirlineTools``.

    Parameters come from tau2's own ``Tool.openai_schema``. Mutation follows
    the ``@is_tool`` type: WRITE mutates; READ does not; THINK does not (tau2
    documents it as "will not obtain new information or change the database");
    GENERIC is left undecided (tau2 says nothing general about it - in the
    airline and retail domains it is ``calculate`` and
    ``transfer_to_human_agents``), so the checklist's own declaration stands.
    """
    from .tools import load_tau2_toolkit

    return [_from_loaded(tool) for tool in load_tau2_toolkit(import_path)]


def load_tool_infos(spec: str | Path) -> list[ToolInfo]:
    """Tools from a JSON file (a list of schemas, or ``{"tools": [...]}``) or a tau2 import path."""
    from .tools import load_tools

    return [_from_loaded(tool) for tool in load_tools(str(spec))]


def _from_loaded(tool: LoadedTool) -> ToolInfo:
    properties = tool.parameters.get("properties")
    names = frozenset(str(k) for k in properties) if isinstance(properties, Mapping) else None
    return ToolInfo(name=tool.name, parameters=names, mutating=tool.declared_mutating, declared_by=tool.declared_by)


def _tool_infos(tools: Iterable[Mapping[str, Any] | ToolInfo]) -> dict[str, ToolInfo]:
    infos = [t if isinstance(t, ToolInfo) else tool_info_from_schema(t) for t in tools]
    return {t.name: t for t in infos}


# ---------------------------------------------------------------- policy quotes


def normalize_policy_text(text: str) -> str:
    """Fold what differs between a policy file and a quote of it: markdown
    emphasis and list markers, typographic quotes and dashes, case, whitespace."""
    text = unicodedata.normalize("NFKC", text)
    for fancy, plain in (("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'), ("\u201d", '"'), ("`", "")):
        text = text.replace(fancy, plain)
    text = re.sub(r"[\u2013\u2014]", "-", text)
    text = re.sub(r"(\*\*|__|\*)", "", text)
    text = re.sub(r"(?m)^\s*(?:[-+]|\d+\.)\s+", " ", text)
    text = re.sub(r"(?m)^\s*#+\s*", " ", text)
    return re.sub(r"\s+", " ", text).strip().casefold()


def quote_in_policy(quote: str, normalized_policy: str) -> bool:
    """Whether ``quote`` occurs in the (normalized) policy; ``...`` splits ordered fragments."""
    position = 0
    for fragment in re.split(r"\s*(?:\.\.\.|\u2026)\s*", quote):
        needle = normalize_policy_text(fragment)
        if not needle:
            continue
        found = normalized_policy.find(needle, position)
        if found < 0:
            return False
        position = found + len(needle)
    return True


# ---------------------------------------------------------------- the validator


class _Collector:
    def __init__(self, doc: LocatedYaml | None, file: str | None) -> None:
        self.doc = doc
        self.file = file
        self.problems: list[Problem] = []

    def add(self, path: PathKey, message: str, severity: Severity = "error") -> None:
        line = self.doc.line_of(path) if self.doc is not None else None
        field = ".".join(str(p) for p in path) or None
        problem = Problem(file=self.file, line=line, field=field, message=message, severity=severity)
        if problem not in self.problems:  # a fact match shared by several checks is reported once
            self.problems.append(problem)


def _arg_names(expression: str) -> set[str]:
    names = set(_ARG_DOT.findall(expression))
    for double, single in _ARG_INDEX.findall(expression):
        names.add(double or single)
    return names


def _name_problem(name: str) -> str | None:
    """Why no agent could call a tool by ``name`` (a space at either end, an invisible character), or None."""
    if name != name.strip():
        return "has whitespace at the start or end"
    hidden = next((c for c in name if not c.isprintable()), None)
    if hidden is not None:
        return f"contains the non-printable character U+{ord(hidden):04X}"
    return None


def _one_line(exc: Exception) -> str:
    """An engine message on one line: the caret drawing is dropped, the position stays."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.lstrip().startswith("|")]
    return " ".join(lines)


def _child(container: Any, part: str | int) -> Any:
    """``container[part]`` when it exists, else None (an error's location may not exist in the data)."""
    if isinstance(container, dict):
        return container.get(part)
    if isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container):
        return container[part]
    return None


def _validate_schema(doc: LocatedYaml, out: _Collector) -> Checklist | None:
    """Validate the document, reporting every schema error.

    To report the other problems too, it then drops each offending mapping
    key (an unknown field, a wrong-typed value such as ``mutating: off``) and
    validates the rest once more; only when that still fails (a required field
    is missing) are the semantic checks skipped. The dropped keys are already
    reported as errors, so nothing wrong is passed over.
    """
    if not isinstance(doc.data, dict):
        out.add((), "a checklist must be a YAML mapping")
        return None
    data = doc.data
    try:
        checklist = Checklist.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        for err in errors:
            path = tuple(err["loc"])
            out.add(path, schema_error_message(err))
        import copy

        data = copy.deepcopy(data)
        for err in errors:
            *parent_path, key = err["loc"]
            parent: Any = data
            for part in parent_path:
                parent = _child(parent, part)
            if isinstance(parent, dict) and isinstance(key, str):
                parent.pop(key, None)
        try:
            checklist = Checklist.model_validate(data)
        except ValidationError:
            return None
    checklist._source = doc
    return checklist


def _requirements(checklist: Checklist) -> list[tuple[PathKey, str | None, Requirement]]:
    """Every requirement with its path and its tool key (None for general rules)."""
    found: list[tuple[PathKey, str | None, Requirement]] = []
    for key, spec in checklist.tools.items():
        for index, req in enumerate(spec.requirements):
            found.append((("tools", key, "requirements", index), key, req))
    for index, req in enumerate(checklist.general_rules):
        found.append((("general_rules", index), None, req))
    return found


def _tools_for_key(key: str, known: Mapping[str, ToolInfo], checklist: Checklist) -> list[ToolInfo]:
    """The known tools a checklist key covers: itself, or what its glob matches (as the guard matches)."""
    if not is_glob(key):
        return [known[key]] if key in known else []
    exact = [k for k in checklist.tools if not is_glob(k)]
    return [info for name, info in known.items() if glob_matches(key, name, exact)]


def _named_tools(value: Any) -> list[str | None]:
    """Tool names in a fact field that may be absent, a name, a list of names or of sources with ``tool``."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    names: list[str | None] = []
    for item in items:
        tool = item if isinstance(item, str) else getattr(item, "tool", None)
        if tool is None and isinstance(item, Mapping):
            tool = item.get("tool")
        names.append(tool if isinstance(tool, str) else None)
    return names


class _Semantics:
    """The checks that need a loaded checklist: tools, facts, requirements, version."""

    def __init__(
        self, checklist: Checklist, out: _Collector, policy_text: str | None, known: dict[str, ToolInfo] | None
    ) -> None:
        from policyguard.gate.cel import CheckProgram

        self.checklist = checklist
        self.out = out
        self.policy_text = policy_text
        self.known = known
        self.fact_programs: dict[str, dict[str, CheckProgram]] = {}

    def run(self) -> None:
        self.tools()
        self.facts()
        normalized = normalize_policy_text(self.policy_text) if self.policy_text is not None else None
        ids: dict[str, PathKey] = {}
        for base, tool_key, req in _requirements(self.checklist):
            if req.id in ids:
                first = ".".join(map(str, ids[req.id]))
                self.out.add((*base, "id"), f"duplicate requirement id {req.id!r} (first at {first})")
            else:
                ids[req.id] = (*base, "id")
            if normalized is not None and not quote_in_policy(req.source, normalized):
                self.out.add((*base, "source"), f"quote not found in the policy text: {req.source!r}")
            self.requirement(base, tool_key, req)
        if self.policy_text is not None:
            actual = policy_version(self.policy_text)
            if actual != self.checklist.policy.version:
                self.out.add(
                    ("policy", "version"),
                    f"policy version mismatch: checklist has {self.checklist.policy.version}, "
                    f"the policy text is {actual}",
                )

    def tool_exists(self, name: str) -> bool:
        return self.known is None or name in self.known

    def check_tool(self, path: PathKey, name: str) -> bool:
        """Report ``name`` if no agent could call it, or the tools are known and it is not one of them;
        True when it exists."""
        problem = _name_problem(name)
        if problem is not None:
            self.out.add(path, f"tool name {name!r} {problem}; no tool is called that")
            return False
        if self.tool_exists(name):
            return True
        self.out.add(path, f"unknown tool {name!r}{self.did_you_mean(name)}")
        return False

    def did_you_mean(self, name: str) -> str:
        from policyguard.trajectory.toolnames import nearest

        guess = nearest(name, self.known or {})
        return f"; did you mean {guess!r}?" if guess is not None and guess != name else ""

    def tools(self) -> None:
        checklist, known, out = self.checklist, self.known, self.out
        if known is None:
            out.add(
                ("tools",),
                "tool names were not checked (no tools given): a misspelled tool key or fact tool would go "
                "unnoticed; check them with --tools TOOLS.json or --tools package.module:Class "
                "(library: validate_checklist(..., tools=...))",
                "warning",
            )
        if checklist.principal is not None:
            self.check_tool(("principal", "tool"), checklist.principal.tool)
        for key, spec in checklist.tools.items():
            problem = _name_problem(key)
            if problem is not None:
                out.add(("tools", key), f"tool key {key!r} {problem}; it guards no tool the agent can call")
            if not spec.mutating and spec.requirements:
                out.add(
                    ("tools", key, "mutating"),
                    f"read-only tool {key!r} has {len(spec.requirements)} requirement(s) that never run (the guard "
                    "lets read-only calls through unchecked); declare it mutating: true or move them",
                )
            if problem is None and known is not None and not _tools_for_key(key, known, checklist):
                if is_glob(key):
                    out.add(("tools", key), f"no tool matches the glob {key!r} (among the {len(known)} tools given)")
                else:
                    out.add(
                        ("tools", key),
                        f"unknown tool {key!r} (not among the {len(known)} tools given){self.did_you_mean(key)}",
                    )
            if spec.mutating and not spec.requirements and not checklist.general_rules:
                out.add(("tools", key), f"mutating tool {key!r} has no requirements", "warning")
            if spec.effect is not None:
                self.approval(key, spec)
            if spec.effect is not None and known is not None:
                effect = spec.effect
                arg_fields = {
                    "amount_arg": effect.amount_arg,
                    "currency_arg": effect.currency_arg,
                    "transaction_arg": effect.transaction_arg,
                    "idempotency_arg": effect.idempotency_arg,
                    "resource_arg": effect.resource_arg,
                }
                for info in _tools_for_key(key, known, checklist):
                    for field_name, arg in arg_fields.items():
                        if arg is not None and info.parameters is not None and arg not in info.parameters:
                            out.add(("tools", key, "effect", field_name), f"{info.name!r} has no parameter {arg!r}")
        for name, info in (known or {}).items():
            covering = checklist.tool_key(name)
            declared = checklist.tools[covering] if covering is not None else None
            if info.mutating is True and covering is not None and declared is not None and not declared.mutating:
                source = f"per {info.declared_by}" if info.declared_by else "per the tool source"
                out.add(
                    ("tools", covering, "mutating"),
                    f"{name!r} writes state ({source}) but is declared read-only",
                )
            if info.mutating is False and declared is None:
                message = f"read-only tool {name!r} is not declared; the guard will treat it as mutating"
                out.add(("tools",), message, "warning")
            if info.mutating is not False and declared is None:
                out.add(
                    ("tools",),
                    f"tool {name!r} is not in the checklist; the guard treats a call to it as a call to an "
                    "unknown tool",
                    "warning",
                )

    def approval(self, key: str, spec: ToolSpec) -> None:
        """``approved_by`` names a requirement of this tool that the gate can prove."""
        effect = spec.effect
        assert effect is not None
        path: PathKey = ("tools", key, "effect", "approved_by")
        if effect.approved_by is not None:
            own = {req.id: req for req in spec.requirements}
            req = own.get(effect.approved_by)
            if req is None:
                self.out.add(path, f"approved_by {effect.approved_by!r} is not a requirement of {key!r}")
            elif req.check is None:
                self.out.add(path, f"approved_by {effect.approved_by!r} has no check, so the gate can never prove it")
            if effect.approval_threshold is None:
                self.out.add(path, "approved_by has no effect without an approval_threshold", "warning")
        elif effect.approval_threshold is not None:
            self.out.add(
                ("tools", key, "effect", "approval_threshold"),
                f"no approved_by: every amount above {effect.approval_threshold:g} is blocked, "
                "or waits for a person when the guard has an approval queue (approvals=)",
                "warning",
            )

    def facts(self) -> None:
        from policyguard.gate.cel import HELPER_FUNCTIONS, CelError, compile_check

        for fact, source in self.checklist.facts.items():
            base: PathKey = ("facts", fact)
            exists = self.check_tool((*base, "tool"), source.tool)
            # a newest fact is one record read by a read tool (writes that return it go in refreshed_by);
            # an `all` or `calls` fact lists what reads and writes returned or were asked, so writes belong there
            reads_only = getattr(source, "collect", "newest") == "newest"
            if reads_only and exists and self.known is not None and self.known[source.tool].mutating is True:
                self.out.add((*base, "tool"), f"fact source {source.tool!r} writes state; facts come from read tools")
            params = self.known[source.tool].parameters if self.known and source.tool in self.known else None
            for index, writer in enumerate(source.refreshed_by):
                where: PathKey = (*base, "refreshed_by", index)
                if not self.check_tool(where, writer):
                    continue
                writer_params = self.known[writer].parameters if self.known and writer in self.known else None
                missing = sorted(set(source.match) - set(writer_params)) if writer_params is not None else []
                if missing:
                    self.out.add(where, f"{writer!r} has no parameter {missing[0]!r} to match the {fact} by")
            for field_name in ("also", "invalidated_by"):  # newer fact fields, when the schema has them
                for index, other in enumerate(_named_tools(getattr(source, field_name, None))):
                    where = (*base, field_name, index)
                    if other is None or not self.check_tool(where, other):
                        continue
                    writes = self.known is not None and self.known[other].mutating is True
                    if field_name == "also" and reads_only and writes:
                        self.out.add(where, f"fact source {other!r} writes state; facts come from read tools")
            self.fact_programs[fact] = {}
            for read_arg, expression in source.match.items():
                path: PathKey = (*base, "match", read_arg)
                if params is not None and read_arg not in params:
                    self.out.add(path, f"{source.tool!r} has no parameter {read_arg!r}")
                try:
                    program = compile_check(expression)
                except CelError as exc:
                    self.out.add(path, f"does not compile: {_one_line(exc)}")
                    continue
                self.fact_programs[fact][read_arg] = program
                unknown = program.variables() - _MATCH_VARIABLES - HELPER_FUNCTIONS
                if unknown:
                    self.out.add(
                        path, f"unknown variable(s) {sorted(unknown)}; a match reads args, facts and principal"
                    )
                for name in sorted(program.fact_names() - set(self.checklist.facts)):
                    self.out.add(path, f"fact {name!r} is not declared under facts:")
                if fact in program.fact_names():
                    self.out.add(path, f"fact {fact!r} matches on itself")
            if getattr(source, "fetch", None) is not None:
                self.fetch(base, fact, source, params)

    def fetch(self, base: PathKey, fact: str, source: Any, params: frozenset[str] | None) -> None:
        """A fact's ``fetch:`` (the reads the guard may make itself): compiles, reads args, facts and principal,
        names declared facts other than its own, reads a tool that does not write, and builds maps whose keys
        (when written as literals) are parameters of that tool."""
        from policyguard.gate.cel import HELPER_FUNCTIONS, CelError, compile_check

        path: PathKey = (*base, "fetch")
        if self.known is not None and source.tool in self.known and self.known[source.tool].mutating is True:
            self.out.add(path, f"fetch reads {source.tool!r}, which writes state; the guard only calls read tools")
        try:
            program = compile_check(source.fetch)
        except CelError as exc:
            self.out.add(path, f"does not compile: {_one_line(exc)}")
            return
        unknown = program.variables() - _MATCH_VARIABLES - HELPER_FUNCTIONS
        if unknown:
            self.out.add(path, f"unknown variable(s) {sorted(unknown)}; a fetch reads args, facts and principal")
        for name in sorted(program.fact_names() - set(self.checklist.facts)):
            self.out.add(path, f"fact {name!r} is not declared under facts:")
        if fact in program.fact_names():
            self.out.add(path, f"fact {fact!r} fetches by itself")
        if params is not None:
            for key in sorted(set(_MAP_KEY.findall(source.fetch)) - set(params)):
                self.out.add(path, f"{source.tool!r} has no parameter {key!r} to fetch the {fact} by")

    def fact_closure(self, names: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in seen or name not in self.fact_programs:
                continue
            seen.add(name)
            for program in self.fact_programs[name].values():
                todo.extend(program.fact_names())
        return seen

    def requirement(self, base: PathKey, tool_key: str | None, req: Requirement) -> None:
        from policyguard.gate.cel import CHECK_VARIABLES, HELPER_FUNCTIONS, CelError, compile_check

        out = self.out
        spec = self.checklist.tools.get(tool_key) if tool_key is not None else None
        if req.mode == "shadow" and spec is not None and spec.effect is not None:
            out.add(
                (*base, "mode"),
                f"a money invariant in shadow mode: {tool_key!r} moves money, and a call failing {req.id!r} will "
                "run (only the effect's ceiling, approval threshold and idempotency key still hold); enforce it "
                "once 'policyguard audit report' shows a clean record",
                "warning",
            )
        if req.kind == "procedural" and not req.confirmation and reads_like_confirmation(req.text):
            out.add(
                (*base, "text"),
                "reads like the user's confirmation; add confirmation: true so the verifier must cite the user's "
                "reply (until then only this wording makes it one)",
                "warning",
            )
        for index, prereq in enumerate(req.prerequisites):
            path = (*base, "prerequisites", index)
            exists = self.check_tool(path, prereq)
            if exists and (
                self.checklist.is_mutating(prereq) or (self.known is not None and self.known[prereq].mutating)
            ):
                out.add(path, f"prerequisite {prereq!r} is not a read-only tool")
        if req.check is None:
            if req.examples:
                out.add((*base, "examples"), "examples without a check are never run", "warning")
            return
        if req.kind == "procedural":
            out.add((*base, "check"), "a procedural requirement has a check; make it kind: data", "warning")
        try:
            program = compile_check(req.check)
        except CelError as exc:
            out.add((*base, "check"), f"does not compile: {_one_line(exc)}")
            return
        unknown = program.variables() - CHECK_VARIABLES - HELPER_FUNCTIONS
        if unknown:
            out.add((*base, "check"), f"unknown variable(s) {sorted(unknown)}; a check reads {sorted(CHECK_VARIABLES)}")
        for name in sorted(program.fact_names() - set(self.checklist.facts)):
            out.add((*base, "check"), f"fact {name!r} is not declared under facts:")
        if self.known is not None:
            self.arguments(base, tool_key, req, program.fact_names())
        complying = [e for e in req.examples if e.complies]
        if not complying or len(complying) == len(req.examples):
            missing_kind = "complying" if not complying else "violating"
            out.add((*base, "examples"), f"check has no {missing_kind} example", "warning")
        now = self.checklist.clock or datetime.now(timezone.utc)
        for index, example in enumerate(req.examples):
            path = (*base, "examples", index)
            variables = {"args": example.args, "facts": example.facts, "principal": example.principal, "now": now}
            try:
                holds = program.holds(variables)
            except CelError as exc:
                out.add(path, f"check fails to evaluate on this example: {_one_line(exc)}")
                continue
            if holds != example.complies:
                expected = "comply" if example.complies else "violate"
                out.add(path, f"example should {expected} but the check evaluates to {str(holds).lower()}")

    def arguments(self, base: PathKey, tool_key: str | None, req: Requirement, facts: set[str]) -> None:
        """Every ``args.X`` the check (or a fact match it depends on) reads is a parameter of the tool."""
        assert self.known is not None and req.check is not None
        if tool_key is not None:
            targets = _tools_for_key(tool_key, self.known, self.checklist)
        else:
            targets = [info for info in self.known.values() if info.mutating]
        expressions: list[tuple[str, PathKey]] = [(req.check, (*base, "check"))]
        for fact in sorted(self.fact_closure(facts)):
            for read_arg, fact_program in self.fact_programs.get(fact, {}).items():
                expressions.append((fact_program.source, ("facts", fact, "match", read_arg)))
        for expression, path in expressions:
            guarded = set(_HAS_ARG.findall(expression))
            for arg in sorted(_arg_names(expression) - guarded):
                missing = [t.name for t in targets if t.parameters is not None and arg not in t.parameters]
                if tool_key is None and len(missing) < len(targets):
                    continue  # a general rule needs the argument on at least one tool
                if missing:
                    self.out.add(path, f"argument {arg!r} is not a parameter of {', '.join(missing)}")


def validate_checklist(
    checklist_path_or_obj: str | Path | Checklist,
    *,
    policy_text: str | None = None,
    tools: Sequence[Mapping[str, Any] | ToolInfo] | None = None,
) -> list[Problem]:
    """Every problem in a checklist, errors and warnings, in file order.

    ``policy_text`` enables the quote and version checks, ``tools`` (tool
    schemas in OpenAI or Anthropic form, or :class:`ToolInfo`) the tool and
    argument checks. An unreadable file is one problem, not an exception.
    """
    doc: LocatedYaml | None
    if isinstance(checklist_path_or_obj, Checklist):
        checklist: Checklist | None = checklist_path_or_obj
        doc = checklist_path_or_obj.source
        out = _Collector(doc, doc.file if doc is not None else None)
    else:
        file = str(checklist_path_or_obj)
        try:
            doc = load_yaml_file(checklist_path_or_obj)
        except ChecklistError as exc:
            return [Problem(file=exc.file or file, line=exc.line, field=exc.field, message=exc.message)]
        out = _Collector(doc, file)
        checklist = _validate_schema(doc, out)
    if checklist is not None:
        known = _tool_infos(tools) if tools is not None else None
        _Semantics(checklist, out, policy_text, known).run()
    return sorted(out.problems, key=lambda p: (p.line or 0, p.severity != "error"))


def has_errors(problems: Iterable[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)
