"""``policyguard checklist``: print the schema, start, validate or show a checklist.

``validate`` exits 0 when the checklist is clean (warnings allowed), 1 when it
has errors, 2 when the file (or the policy or tools given) cannot be read.
``init`` writes a skeleton (:mod:`policyguard.authoring.checkinit`); exit 2 when an input
cannot be read or the output exists without ``--force``.
``generate`` is added by :mod:`policyguard.authoring.checkgen.cli` when that package is
present.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any

_TOOLS_HELP = (
    "the agent's tools: a JSON file with a list of OpenAI or Anthropic tool schemas, or a tau2 toolkit "
    "class as 'package.module:Class' (e.g. tau2.domains.airline.tools:AirlineTools)"
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "checklist", help="print the checklist schema, start (init), validate or show a checklist"
    )
    sub = parser.add_subparsers(dest="checklist_command", metavar="SUBCOMMAND", required=True)

    schema = sub.add_parser("schema", help="print the JSON Schema of checklist files")
    schema.set_defaults(func=_schema)

    validate = sub.add_parser(
        "validate",
        help="report every problem in a checklist, with file and line",
        description=(
            "Exit 0 clean (warnings allowed), 1 errors found, 2 a file cannot be read. Without --tools, tool "
            "names are not checked (a misspelled tool key goes unnoticed); a warning says so."
        ),
    )
    validate.add_argument("checklist", metavar="CHECKLIST.yaml", help="the checklist to check")
    validate.add_argument("--policy", metavar="POLICY.md", help="the policy text: checks quotes and the version")
    validate.add_argument("--tools", metavar="TOOLS", help=_TOOLS_HELP)
    validate.set_defaults(func=_validate)

    init = sub.add_parser(
        "init",
        help="write a checklist skeleton: every tool, the policy pinned, one TODO per mutating tool",
        description=(
            "No model needed. A tool is read-only only when it declares so (MCP readOnlyHint: true, "
            "x-mutating: false, tau2 ToolType.READ); every other tool is mutating. Each mutating tool gets a TODO "
            "requirement that makes 'checklist validate --policy' fail until it is written. Exit 0 written, "
            "2 a file cannot be read or the output exists (without --force)."
        ),
    )
    init.add_argument("--policy", metavar="POLICY.md", required=True, help="the policy text to pin")
    init.add_argument("--tools", metavar="TOOLS", required=True, help=_TOOLS_HELP)
    init.add_argument("-o", "--output", metavar="CHECKLIST.yaml", required=True, help="where to write the skeleton")
    init.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    init.set_defaults(func=_init)

    show = sub.add_parser("show", help="render a checklist for a person")
    show.add_argument("checklist", metavar="CHECKLIST.yaml", help="the checklist to render")
    show.add_argument("--tool", metavar="NAME", help="only this tool (and the general rules that apply to it)")
    show.set_defaults(func=_show)

    try:
        checkgen_cli = importlib.import_module("policyguard.authoring.checkgen.cli")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("policyguard.authoring.checkgen"):
            raise  # checkgen is there but broken: say so rather than hide the command
    else:
        checkgen_cli.add_generate_parser(sub)


def _schema(args: argparse.Namespace) -> int:
    from policyguard.checklist.schema import checklist_schema_json

    print(checklist_schema_json())
    return 0


def _error(message: str) -> int:
    print(f"policyguard: error: {message}", file=sys.stderr)
    return 2


def _init(args: argparse.Namespace) -> int:
    from policyguard.authoring.checkinit import write_skeleton
    from policyguard.errors import ConfigError

    try:
        text = write_skeleton(args.policy, args.tools, args.output, force=args.force)
    except ConfigError as exc:
        return _error(str(exc))
    todos = text.count("-todo\n")
    print(f"{args.output}: skeleton written; {todos} TODO requirement(s) to write", file=sys.stderr)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from policyguard.authoring.validate import checklist_stats, has_errors, load_tool_infos, validate_checklist
    from policyguard.checklist.schema import Checklist
    from policyguard.errors import ConfigError

    path = Path(args.checklist)
    try:
        path.read_bytes()
    except OSError as exc:
        return _error(f"{path}: cannot read file: {exc.strerror}")
    policy_text = None
    if args.policy:
        try:
            policy_text = Path(args.policy).read_text(encoding="utf-8")
        except OSError as exc:
            return _error(f"{args.policy}: cannot read policy: {exc.strerror}")
    tools = None
    if args.tools:
        try:
            tools = load_tool_infos(args.tools)
        except ConfigError as exc:
            return _error(str(exc))

    problems = validate_checklist(path, policy_text=policy_text, tools=tools)
    for problem in problems:
        print(problem)
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    skipped = [what for what, given in (("quotes/version", policy_text), ("tools/arguments", tools)) if given is None]
    note = f" (not checked: {', '.join(skipped)}; pass --policy/--tools)" if skipped else ""
    print(f"{path}: {errors} error(s), {warnings} warning(s){note}", file=sys.stderr)
    if not has_errors(problems):
        from policyguard.checklist.schema import load_checklist

        checklist: Checklist = load_checklist(path)
        print(f"{path}: {checklist_stats(checklist)}", file=sys.stderr)
    return 1 if has_errors(problems) else 0


def _show(args: argparse.Namespace) -> int:
    from policyguard.checklist.schema import load_checklist

    checklist = load_checklist(args.checklist)
    if args.tool is not None and not checklist.known_tool(args.tool):
        return _error(_unknown_tool(args.tool, checklist.tools, args.checklist))
    print(render_checklist(checklist, tool=args.tool, file=str(args.checklist)))
    return 0


def _unknown_tool(tool: str, known: Any, file: str) -> str:
    """Why ``--tool`` shows nothing: the checklist does not name it, so the guard blocks it by default."""
    from policyguard.trajectory.toolnames import nearest

    guess = nearest(tool, known)
    hint = f"; did you mean {guess!r}?" if guess is not None else ""
    return (
        f"--tool {tool!r}: not in {file}, so the guard blocks every call to it "
        f"(unless built with unknown_tools='check'){hint}"
    )


def effect_lines(effect: Any) -> list[str]:
    """A tool's ``effect:``: what the executor's ledger holds it to, and which arguments it reads."""
    currency = f" in args.{effect.currency_arg}" if effect.currency_arg else ""
    lines = [f"    effect: {effect.kind}: moves args.{effect.amount_arg}{currency} on args.{effect.transaction_arg}, "
             f"at most once per args.{effect.idempotency_arg}"]  # fmt: skip
    if effect.resource_arg:
        lines.append(f"      resource: {effect.resource_arg} must equal the granted resource")
    lines.append(f"      ceiling: {effect.ceiling:g} a call" if effect.ceiling is not None else "      ceiling: none")
    if effect.approval_threshold is not None:
        by = f", proven by [{effect.approved_by}]" if effect.approved_by else " (no approved_by: a queue or a block)"
        lines.append(f"      approval: above {effect.approval_threshold:g} needs a person's approval{by}")
    return lines


def render_checklist(checklist: Any, *, tool: str | None = None, file: str | None = None) -> str:
    """A plain-text view of a checklist: tools, mutation, requirements with source and check."""
    from policyguard.authoring.validate import checklist_stats
    from policyguard.checklist.schema import Checklist, Requirement

    assert isinstance(checklist, Checklist)
    lines: list[str] = []
    wrap = textwrap.TextWrapper(width=100, subsequent_indent=" " * 10)

    def requirement(req: Requirement) -> None:
        shadow = " (shadow: records, never blocks)" if req.mode == "shadow" else ""
        lines.append(f"    [{req.id}] {req.kind}{shadow}")
        lines.append(wrap.fill(f"      text: {req.text.strip()}"))
        lines.append(wrap.fill(f"      source: \u201c{req.source.strip()}\u201d"))
        if req.prerequisites:
            lines.append(f"      reads first: {', '.join(req.prerequisites)}")
        if req.check:
            check = " ".join(req.check.split())
            lines.append(wrap.fill(f"      check: {check}"))
            good = sum(1 for e in req.examples if e.complies)
            lines.append(f"      examples: {good} complying, {len(req.examples) - good} violating")
        else:
            lines.append("      check: none (judged by the verifier)")

    if file:
        lines.append(f"checklist: {file}")
    lines.append(f"policy: {checklist.policy.name} {checklist.policy.version}")
    if checklist.clock is not None:
        lines.append(f"clock: {checklist.clock.isoformat()}")
    if checklist.principal is not None:
        lines.append(f"principal: {checklist.principal.tool} -> {checklist.principal.field}")
    if checklist.facts and tool is None:
        lines.append("facts:")
        for name, source in checklist.facts.items():
            keys = ", ".join(f"{k}={v}" for k, v in source.match.items()) or "newest result"
            lines.append(f"  {name} <- {source.tool}({keys})")

    if tool is not None:
        spec = checklist.tool_spec(tool)
        if spec is None:
            lines.append(f"tool {tool}: not in the checklist - the guard blocks it unless unknown_tools='check'")
            selected: list[tuple[str, Any]] = []
        else:
            selected = [(tool, spec)]
    else:
        selected = list(checklist.tools.items())
    if selected:
        lines.append("tools:")
    for name, spec in selected:
        flag = "MUTATING" if spec.mutating else "read-only"
        about = f" - {spec.description.strip()}" if spec.description else ""
        lines.append(f"  {name}: {flag}{about}")
        if spec.effect is not None:
            lines += effect_lines(spec.effect)
        for req in spec.requirements:
            requirement(req)
    show_general = tool is None or checklist.is_mutating(tool)
    if checklist.general_rules and show_general:
        lines.append("general rules (every mutating tool):")
        for req in checklist.general_rules:
            requirement(req)
    lines.append(f"stats: {checklist_stats(checklist)}")
    return "\n".join(lines)
