"""The scenarios file of ``policyguard test``: whole decisions a team expects, written down before shipping.

A scenario is one pending call after one dialogue and the outcome the guard
must reach::

    scenarios:
      - name: a refund above what was captured is blocked
        trajectory: traj.json        # a path (relative to this file) or an inline message list
        call: call120.json           # a path or an inline {id, name, arguments}
        expect: block                # allow | block | escalate
        not_met: [within-captured]   # optional: requirement ids that must be NOT MET
        verdicts: verdicts/120.json  # optional: recorded verifier answers (the scripted-model format)

Every problem with the file (YAML, a field, a path that cannot be read, JSON
that is not a dialogue or a call) is a :class:`ScenarioError` naming the file,
the line and the field, so ``policyguard test`` exits 2 on it before deciding
anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policyguard.checklist.schema import Checklist, is_glob, schema_error_message
from policyguard.checklist.yamlsource import LocatedYaml, load_yaml_file
from policyguard.errors import ChecklistError, ConfigError, FormatError
from policyguard.trajectory import strictjson
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.inputs import as_call
from policyguard.trajectory.limits import call_problem
from policyguard.trajectory.messages import ToolCall, Trajectory
from policyguard.verifier.models.scripted import ScriptedModel

Expect = Literal["allow", "block", "escalate"]


class ScenarioError(ChecklistError):
    """A scenarios file (or a file it names) cannot be used; names the file, line and field."""


class ScenarioSpec(BaseModel):
    """One scenario as written in the file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1)
    trajectory: str | list[Any] | dict[str, Any]
    call: str | dict[str, Any]
    expect: Expect
    not_met: list[str] = Field(default_factory=list)
    format: Literal["auto", "openai_chat", "openai_responses", "anthropic", "langchain"] = "auto"
    verdicts: str | None = Field(
        default=None, description="Recorded verifier answers for this scenario: a scripted-model file."
    )


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scenarios: list[ScenarioSpec] = Field(min_length=1)


class Scenario(BaseModel):
    """A scenario ready to run: its dialogue and call read, its place in the file kept for messages."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str
    where: str = Field(description="file:line of the scenario, for the report")
    trajectory: Trajectory
    call: ToolCall
    expect: Expect
    not_met: list[str]
    verdicts: Path | None = Field(description="The scenario's recorded verifier answers (scripted-model file).")


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Every scenario in ``path``, read and checked; the first problem raises :class:`ScenarioError`."""
    path = Path(path)
    try:
        doc = load_yaml_file(path)
    except ChecklistError as exc:
        raise ScenarioError(exc.message, file=exc.file, line=exc.line, field=exc.field) from None
    if not isinstance(doc.data, dict):
        raise ScenarioError("a scenarios file is a YAML mapping with a 'scenarios' list", file=doc.file, line=1)
    try:
        parsed = ScenarioFile.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _error(doc, schema_error_message(first), tuple(first["loc"])) from None
    return [_scenario(doc, path.parent, index, spec) for index, spec in enumerate(parsed.scenarios)]


def _error(doc: LocatedYaml, message: str, loc: tuple[str | int, ...]) -> ScenarioError:
    located = doc.error(message, loc)
    return ScenarioError(located.message, file=located.file, line=located.line, field=located.field)


def _scenario(doc: LocatedYaml, base: Path, index: int, spec: ScenarioSpec) -> Scenario:
    at = ("scenarios", index)
    raw = _json_or_inline(doc, base, spec.trajectory, (*at, "trajectory"), "trajectory")
    system = None
    if isinstance(raw, dict):  # {"messages": [...]} or Anthropic's {"system": ..., "messages": [...]}
        if "messages" not in raw:
            raise _error(doc, "expected a message list or an object with 'messages'", (*at, "trajectory"))
        system, raw = raw.get("system"), raw["messages"]
    try:
        trajectory = to_trajectory(raw, format=spec.format, system=system)  # type: ignore[arg-type]
    except FormatError as exc:
        raise _error(doc, str(exc), (*at, "trajectory")) from None
    call = _call(doc, _json_or_inline(doc, base, spec.call, (*at, "call"), "call"), (*at, "call"))
    verdicts = None
    if spec.verdicts is not None:
        verdicts = base / spec.verdicts
        try:
            ScriptedModel.from_file(verdicts)  # read once here, so a bad file is exit 2 with its line
        except ConfigError as exc:
            raise _error(doc, str(exc), (*at, "verdicts")) from None
    return Scenario(
        name=spec.name,
        where=f"{doc.file}:{doc.line_of(at)}",
        trajectory=trajectory,
        call=call,
        expect=spec.expect,
        not_met=spec.not_met,
        verdicts=verdicts,
    )


def _json_or_inline(doc: LocatedYaml, base: Path, value: Any, loc: tuple[str | int, ...], what: str) -> Any:
    """An inline value as is; a string is a JSON file relative to the scenarios file."""
    if not isinstance(value, str):
        return value
    target = base / value
    try:
        return strictjson.loads(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _error(doc, f"cannot read the {what} file {target}: {exc.strerror or exc}", loc) from None
    except RecursionError:
        raise _error(doc, f"the {what} file {target} is nested too deeply to read", loc) from None
    except ValueError as exc:
        raise _error(doc, f"the {what} file {target} is not valid JSON: {exc}", loc) from None


def _call(doc: LocatedYaml, data: Any, loc: tuple[str | int, ...]) -> ToolCall:
    if not isinstance(data, dict):
        raise _error(doc, "a tool call is an object {id, name, arguments}", loc)
    try:
        call = as_call(data)
    except (FormatError, KeyError, ValueError, TypeError) as exc:
        raise _error(doc, "not a tool call: " + " ".join(str(exc).split()), loc) from None
    problem = call_problem(call.arguments)
    if problem is not None:
        raise _error(doc, f"call {call.id!r}: {problem}", loc)
    return call


def starter_scenarios(checklist: Checklist, checklist_name: str) -> str:
    """A first scenarios file for ``checklist``: one scenario per mutating tool, to edit into real cases.

    Each starts from a dialogue with no reads, where a data requirement cannot
    hold, so its ``expect: block`` is what a sound checklist decides; the
    comments say what to change to make it a case of your own.
    """
    lines = [
        f"# Scenarios for {checklist_name}: run them with",
        f"#   policyguard test scenarios.yaml --policy POLICY.md --checklist {checklist_name}",
        "# Each: a dialogue (inline, or a JSON file relative to this one), the pending call, and the outcome",
        "# the guard must reach (allow | block | escalate); not_met lists requirements that must be NOT MET;",
        "# verdicts: a file of recorded verifier answers (the scripted-model format) for a model's part.",
        "scenarios:",
    ]
    tools = [name for name, spec in checklist.tools.items() if spec.mutating and not is_glob(name)]
    for name in tools or ["YOUR_WRITE_TOOL"]:
        spec = checklist.tools.get(name)
        checked = [r.id for r in spec.requirements if r.check is not None] if spec is not None else []
        lines += [
            f"  - name: {name} with nothing read first" + (" is blocked" if checked else ""),
            "    trajectory:",
            "      - {role: user, content: Please do it.}",
            "    format: openai_chat  # one plain message reads alike in every format: say which",
            f"    call: {{id: call_1, name: {name}, arguments: {{}}}}  # TODO: the arguments",
        ]
        if checked:
            lines += ["    expect: block", f"    # not_met: [{checked[0]}]  # once the arguments are filled in"]
        else:  # nothing the gate proves: only a verifier (--model, verdicts:) can block it
            lines += ["    expect: allow  # with --model none; a verifier would judge its requirements"]
    return "\n".join(lines) + "\n"
