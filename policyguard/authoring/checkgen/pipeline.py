"""The four-step checklist generation pipeline (PolicyGuard paper, arXiv 2606.29225, appendix C).

1. **classify** each tool as mutating or read-only: what the tool declares
   wins; the model is asked only about tools that declare nothing; a tool still
   unknown (or whose answer is unusable) stays mutating;
2. **requirements** per mutating tool, each quoting its policy sentence, with a
   CEL ``check`` and examples where expressible, and the ``facts`` they read;
3. **general rules** for every mutating call (and the policy's clock, if stated);
4. **review** of the draft against the policy: omissions and over-specifications
   found, the revised set returned, every change recorded in the changelog.

A procedural requirement that reads like the user's confirmation gets
``confirmation: true`` even when the model left it out (noted in the run's notes).

The assembled checklist is written atomically and then validated; a run that
fails in any step writes no output. Validation problems do not stop the write:
the file is there for a person to fix, and the caller reports the problems.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from policyguard.checklist.schema import Checklist, FactSource, PolicyRef, Requirement, ToolSpec
from policyguard.errors import ChecklistError
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.evidence import reads_like_confirmation
from policyguard.verifier.models.base import Model
from policyguard.verifier.prompts import render

from ..tools import ToolInfo
from ..validate import Problem, has_errors, validate_checklist
from ..validate import ToolInfo as ValidatorTool
from .ask import StepAsker, StepFailed
from .assemble import GENERAL, fact_changes, merge_facts, requirement_changes, unique_ids
from .cache import ResponseCache, StepRecords, atomic_write_text
from .schemas import ClassifyOut, GeneralOut, RequirementsOut, ReviewOut


@dataclass
class Classification:
    """Whether a tool mutates, and what decided it."""

    mutating: bool
    by: str


@dataclass
class GenerateResult:
    """What a run produced: the checklist (already written), its problems and the run's notes."""

    checklist: Checklist
    output: Path
    steps_dir: Path
    problems: list[Problem]
    notes: list[str] = field(default_factory=list)
    model_calls: int = 0

    @property
    def ok(self) -> bool:
        """True when no error-level problem remains (warnings allowed)."""
        return not has_errors(self.problems)


def steps_dir_for(output: Path) -> Path:
    return output.with_name(output.name + ".steps")


def cache_dir_for(output: Path) -> Path:
    return output.with_name(output.name + ".cache")


def generate_checklist(
    policy_text: str,
    tools: Sequence[ToolInfo],
    model: Model,
    output: str | Path,
    *,
    policy_name: str,
    policy_path: str | None = None,
    cache_dir: str | Path | None = None,
    resume: bool = False,
    today: date | None = None,
    log: Callable[[str], None] | None = None,
) -> GenerateResult:
    """Run the four steps, write the checklist to ``output`` and validate it.

    Raises :class:`~policyguard.authoring.checkgen.ask.StepFailed` (nothing written) when
    a step gets no usable answer; returns the validation problems otherwise.
    """
    output = Path(output)
    steps_dir = steps_dir_for(output)
    records = StepRecords(steps_dir)
    cache = ResponseCache(Path(cache_dir) if cache_dir is not None else cache_dir_for(output))
    asker = StepAsker(model, cache, records, resume=resume, log=log)
    notes: list[str] = []
    problems: list[Problem] = []

    classes = _classify(asker, records, policy_text, tools, notes)
    mutating = [t for t in tools if classes[t.name].mutating]
    read_only = [t for t in tools if not classes[t.name].mutating]
    read_views = [_view(t) for t in read_only]

    facts: dict[str, FactSource] = {}
    draft: dict[str, list[Requirement]] = {}
    for tool in mutating:
        prompt = render(
            "checkgen_requirements.j2",
            policy_text=policy_text,
            tool=_view(tool),
            read_tools=read_views,
            known_facts_yaml=_facts_yaml(facts),
        )
        step = asker.ask(f"2-requirements-{tool.name}", "requirements", prompt, RequirementsOut)
        draft[tool.name] = step.requirements
        merge_facts(facts, step.facts, f"the requirements for {tool.name!r}", problems)

    prompt = render(
        "checkgen_general.j2",
        policy_text=policy_text,
        mutating_tools=[_view(t) for t in mutating],
        read_tools=read_views,
        known_facts_yaml=_facts_yaml(facts),
    )
    general = asker.ask("3-general", "general", prompt, GeneralOut)
    draft[GENERAL] = general.general_rules
    merge_facts(facts, general.facts, "the general rules", problems)
    clock = _clock(general.clock, problems)

    revised, revised_facts = _review(asker, records, policy_text, mutating, read_views, draft, facts, notes)
    revised = {scope: _flag_confirmations(scope, reqs, notes) for scope, reqs in revised.items()}

    known = {t.name for t in tools}
    specs: dict[str, ToolSpec] = {}
    for tool in tools:
        reqs = revised.get(tool.name, [])
        if reqs and not classes[tool.name].mutating:
            problems.append(
                Problem(
                    field=f"tools.{tool.name}",
                    message=f"the reviewer gave requirements for read-only tool {tool.name!r}; they are never "
                    "checked - make the tool mutating or move them",
                )
            )
        specs[tool.name] = ToolSpec(
            mutating=classes[tool.name].mutating, description=_first_line(tool.description), requirements=reqs
        )
    for name, reqs in revised.items():
        if name != GENERAL and name not in known:
            specs[name] = ToolSpec(mutating=True, requirements=reqs)  # the validator reports the unknown tool

    checklist = Checklist(
        policy=PolicyRef(name=policy_name, version=policy_version(policy_text), path=policy_path),
        clock=clock,
        facts=revised_facts,
        tools=specs,
        general_rules=revised.get(GENERAL, []),
        principal=general.principal,
    )
    text = _header(model.name, today or datetime.now(timezone.utc).date(), policy_name, checklist) + _yaml(
        checklist.model_dump(mode="json", exclude_none=True)
    )
    atomic_write_text(output, text)
    records.write("5-notes", {"notes": notes, "pipeline_problems": [p.model_dump() for p in problems]})

    problems = [p.model_copy(update={"file": str(output)}) for p in problems]
    problems.extend(_validate(output, policy_text, tools))
    return GenerateResult(
        checklist=checklist,
        output=output,
        steps_dir=steps_dir,
        problems=problems,
        notes=notes,
        model_calls=asker.model_calls,
    )


def _classify(
    asker: StepAsker,
    records: StepRecords,
    policy_text: str,
    tools: Sequence[ToolInfo],
    notes: list[str],
) -> dict[str, Classification]:
    classes = {
        t.name: Classification(t.declared_mutating, f"declared ({t.declared_by})")
        for t in tools
        if t.declared_mutating is not None
    }
    unknown = [t for t in tools if t.declared_mutating is None]
    answers: dict[str, Classification] = {}
    if unknown:
        prompt = render("checkgen_classify.j2", policy_text=policy_text, tools=[_view(t) for t in unknown])
        try:
            step = asker.ask("1-classify", "classify", prompt, ClassifyOut)
        except StepFailed as exc:
            if not exc.malformed:
                raise
            notes.append(f"classify: {exc}; the unclassified tools stay mutating")
        else:
            asked = {t.name for t in unknown}
            for item in step.tools:
                if item.name not in asked:
                    notes.append(f"classify: the model answered about {item.name!r}, which it was not asked; ignored")
                    continue
                previous = answers.get(item.name)
                mutating = item.mutating or (previous is not None and previous.mutating)
                answers[item.name] = Classification(mutating, f"model: {item.reason}".strip())
    for tool in unknown:
        if tool.name in answers:
            classes[tool.name] = answers[tool.name]
        else:
            classes[tool.name] = Classification(True, "unknown: no usable model answer, so mutating")
            notes.append(f"classify: no usable answer for {tool.name!r}; it stays mutating")
    records.write(
        "1-classification",
        {"tools": {t.name: {"mutating": classes[t.name].mutating, "by": classes[t.name].by} for t in tools}},
    )
    return classes


def _review(
    asker: StepAsker,
    records: StepRecords,
    policy_text: str,
    mutating: Sequence[ToolInfo],
    read_views: list[dict[str, str]],
    draft: dict[str, list[Requirement]],
    facts: dict[str, FactSource],
    notes: list[str],
) -> tuple[dict[str, list[Requirement]], dict[str, FactSource]]:
    draft_doc = {
        "tools": {t.name: [_req_dump(r) for r in draft[t.name]] for t in mutating},
        "general_rules": [_req_dump(r) for r in draft[GENERAL]],
        "facts": {name: s.model_dump(mode="json", exclude_none=True) for name, s in facts.items()},
    }
    prompt = render(
        "checkgen_review.j2",
        policy_text=policy_text,
        mutating_tools=[_view(t) for t in mutating],
        read_tools=read_views,
        draft_yaml=_yaml(draft_doc),
    )
    review = asker.ask("4-review", "review", prompt, ReviewOut)
    revised: dict[str, list[Requirement]] = {}
    for tool in mutating:
        if tool.name in review.tools:
            revised[tool.name] = review.tools[tool.name]
        else:
            revised[tool.name] = draft[tool.name]
            notes.append(f"review: the reviewer returned nothing for {tool.name!r}; its draft requirements are kept")
    for name, reqs in review.tools.items():
        if name not in revised:
            revised[name] = reqs
    revised[GENERAL] = review.general_rules
    revised_facts = {**facts, **review.facts}

    changes = requirement_changes(draft, revised) + fact_changes(facts, revised_facts)
    ordered = [(t.name, revised[t.name]) for t in mutating]
    ordered += [(name, reqs) for name, reqs in revised.items() if name not in {t.name for t in mutating}]
    final = unique_ids(ordered, changes)
    records.write(
        "4-review-changelog",
        {
            "omissions": [f.model_dump() for f in review.omissions],
            "over_specifications": [f.model_dump() for f in review.over_specifications],
            "changes": changes,
        },
    )
    return final, revised_facts


def _flag_confirmations(scope: str, requirements: list[Requirement], notes: list[str]) -> list[Requirement]:
    """``requirements`` with ``confirmation: true`` on each procedural one that reads like the user's yes.

    The model is asked for the flag too; this makes sure no requirement the verifier would treat as a
    confirmation by its wording is left unflagged (``validate`` would warn about it).
    """
    flagged: list[Requirement] = []
    for req in requirements:
        if req.kind == "procedural" and not req.confirmation and reads_like_confirmation(req.text):
            notes.append(f"{scope}: {req.id} reads like the user's confirmation; set confirmation: true")
            req = req.model_copy(update={"confirmation": True})
        flagged.append(req)
    return flagged


def _validate(output: Path, policy_text: str, tools: Sequence[ToolInfo]) -> list[Problem]:
    infos = [
        ValidatorTool(
            name=t.name,
            parameters=frozenset(t.parameters.get("properties") or {}),
            mutating=t.declared_mutating,
        )
        for t in tools
    ]
    try:
        return validate_checklist(output, policy_text=policy_text, tools=infos)
    except ChecklistError as exc:  # pragma: no cover - the validator reports problems rather than raising
        return [Problem(file=exc.file or str(output), line=exc.line, field=exc.field, message=exc.message)]


def _clock(value: str | None, problems: list[Problem]) -> datetime | None:
    if value is None:
        return None
    try:
        clock = datetime.fromisoformat(value)
    except ValueError:
        clock = None
    if clock is None or clock.tzinfo is None:
        problems.append(
            Problem(
                field="clock", message=f"the model's clock {value!r} is not an ISO-8601 time with an offset; left out"
            )
        )
        return None
    return clock


def _view(tool: ToolInfo) -> dict[str, str]:
    """A tool as the prompts show it: name, one-line description, compact parameter schema."""
    return {
        "name": tool.name,
        "description": " ".join(tool.description.split()),
        "parameters_json": json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True),
    }


def _first_line(text: str) -> str | None:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return None


def _req_dump(req: Requirement) -> dict[str, Any]:
    return req.model_dump(mode="json", exclude_none=True)


def _facts_yaml(facts: dict[str, FactSource]) -> str:
    if not facts:
        return ""
    return _yaml({name: s.model_dump(mode="json", exclude_none=True) for name, s in facts.items()})


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False)


def _header(model_name: str, day: date, policy_name: str, checklist: Checklist) -> str:
    return (
        f"# Generated by `policyguard checklist generate` with model {model_name} on {day.isoformat()}\n"
        f"# from policy {policy_name!r} version {checklist.policy.version}.\n"
        "# Machine-written: review every requirement against the policy before relying on it.\n"
    )
