"""Replay real agent runs: would the guard have let each write through?

Input is one or more tau2 results files (``tau2.data_model.simulation.Results``,
what ``tau2 run`` and the public leaderboard publish) or folders written by
``policyguard bench tau2`` (each simulation keeps its tau2 dialogue; a guarded
run's dialogue holds only the calls its guard let through). For every call an agent
made to a *mutating* tool (per the checklist; a tool the checklist does not
name counts as mutating, and the guard blocks it), the guard decides the call on
exactly the dialogue before the assistant message that made it, with the tool
results as recorded; nothing is re-executed and no environment is built. All
calls of one assistant message are judged on the same dialogue, the way
:class:`~policyguard.tau2.agent.GuardedAgent` judges them live (an earlier call
of the same message has no result yet when the message is sent). A results file
holds no system prompt; the guard does not need one (the policy comes with the
checklist).

Each write gets a label:

* ``gold`` - its tool and arguments match one of the task's gold actions, compared
  the way tau2's evaluator compares actions (``Action.compare_with_tool_call``:
  same name; the arguments the call passes, or only the action's
  ``compare_args`` when it lists them, are equal);
* ``contradicting_gold`` - a gold write of a task whose gold contradicts the
  written policy (:data:`.labels.POLICY_CONTRADICTING_GOLD`), reported apart as
  in the offline replay;
* ``extra`` - not gold, in a simulation that earned reward 1;
* ``non_gold`` - not gold, in a simulation that did not (reward < 1 or none).
  This is NOT the same as a policy violation: many failures are wrong choices
  the policy allows.

A label file (:class:`LabelFile`) gives true per-call labels; a call it names is
labelled ``violation`` or ``compliant`` instead.

A blocked write is a *read-first* block when the gate blocked it only because
something was not read (every NOT_MET requirement's evidence is a missing fact,
a missing principal or a prerequisite read not made): the remediation names the
read, so an agent could make it and retry. Any other block (a check that is
false or cannot be evaluated, an unknown tool, a bad call, the verifier) is a
*hard* refusal.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..checklist import Checklist
from ..decision import Decision
from ..errors import ConfigError
from ..messages import ToolCall
from .domain import to_policyguard
from .guarding import CallChecker
from .labels import POLICY_CONTRADICTING_GOLD

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.simulation import Results, SimulationRun
    from tau2.data_model.tasks import Action, Task

Label = Literal["gold", "contradicting_gold", "extra", "non_gold", "violation", "compliant"]
LABELS: tuple[Label, ...] = ("gold", "contradicting_gold", "extra", "non_gold", "violation", "compliant")
BlockKind = Literal["read_first", "hard"]

GOLD_RULE = (
    "gold = same tool and arguments as one of the task's gold assistant actions, compared as tau2's evaluator "
    "compares actions (Action.compare_with_tool_call: the arguments the call passes, or only the action's "
    "compare_args when set, must be equal)"
)
NON_GOLD_NOTE = (
    "non_gold is not the same as a policy violation: a failed simulation's writes are often wrong choices "
    "the policy allows (pass --labels with true per-call labels to count violations)"
)
_READ_EVIDENCE = ("missing fact", "missing principal", "prerequisite read not made")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- the per-call label file -----------------------------------------------------


class CallLabel(_Model):
    """One true label: ``simulation`` (the SimulationRun id) and either ``call_id`` or ``turn``.

    ``turn`` is the assistant message's ``turn_idx`` in the results file (its
    index in ``messages`` when the file has no ``turn_idx``) and labels every
    write of that message. ``file`` (a results file's name) narrows the match
    when several files share simulation ids.
    """

    simulation: str
    call_id: str | None = None
    turn: int | None = None
    file: str | None = None
    violation: bool

    @model_validator(mode="after")
    def _one_key(self) -> CallLabel:
        if (self.call_id is None) == (self.turn is None):
            raise ValueError("give exactly one of call_id or turn")
        return self


class LabelFile(_Model):
    """``{"labels": [{"simulation": "...", "call_id": "...", "violation": true}, ...]}``."""

    labels: list[CallLabel]


def load_label_file(path: str | Path) -> LabelFile:
    file = Path(path)
    try:
        return LabelFile.model_validate_json(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the label file: {exc.strerror or exc}") from exc
    except ValidationError as exc:
        raise ConfigError(f"{file}: not a label file: {_first_error(exc)}") from exc


# -- the report ------------------------------------------------------------------


class SimCall(_Model):
    """One write an agent made in a real run, and the guard's decision on it."""

    file: str
    simulation: str
    task: str
    trial: int | None
    reward: float | None
    turn: int
    call_id: str
    tool: str
    arguments: dict[str, Any]
    label: Label
    outcome: str
    stage: str
    block_kind: BlockKind | None = None
    not_met: list[str] = Field(default_factory=list)
    message: str | None = None

    @property
    def blocked(self) -> bool:
        return self.outcome != "allow"


class SimsReport(_Model):
    """Everything ``bench sims`` measured; :meth:`summary` is the ``--json`` output."""

    domain: str
    config: str
    checklist: str
    files: list[str]
    simulations: int
    rewarded: int
    skipped: int = Field(default=0, description="bench tau2 simulations without a dialogue (infra errors).")
    tasks_without_gold: list[str] = Field(default_factory=list)
    calls: list[SimCall]
    runtime_s: float = 0.0

    def count(self, label: Label, *, blocked: bool = False, kind: BlockKind | None = None) -> int:
        return sum(
            1
            for c in self.calls
            if c.label == label and (not blocked or c.blocked) and (kind is None or c.block_kind == kind)
        )

    def by_requirement(self, labels: Iterable[Label] | None = None) -> dict[str, int]:
        """Requirement id -> blocked writes in which it was NOT_MET (``<stage>`` when no requirement was)."""
        wanted = set(labels) if labels is not None else None
        counts: Counter[str] = Counter()
        for call in self.calls:
            if call.blocked and (wanted is None or call.label in wanted):
                counts.update(call.not_met or [f"<{call.stage}>"])
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def summary(self) -> dict[str, Any]:
        return {
            "simulations": self.simulations,
            "writes_total": len(self.calls),
            "gold_writes": self.count("gold"),
            "gold_blocked": self.count("gold", blocked=True),
            "gold_blocked_hard": self.count("gold", blocked=True, kind="hard"),
            "extra_writes": self.count("extra"),
            "extra_blocked": self.count("extra", blocked=True),
            "non_gold_writes": self.count("non_gold"),
            "non_gold_blocked": self.count("non_gold", blocked=True),
            "by_requirement": self.by_requirement(),
            "calls": [c.model_dump(mode="json") for c in self.calls],
        }


# -- loading ---------------------------------------------------------------------


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


def load_results_file(path: str | Path) -> Results:
    """A tau2 results file, validated by tau2's own model; a one-line error naming the file otherwise."""
    from .domain import import_tau2

    import_tau2()
    from tau2.data_model.simulation import Results

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read the results file: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        return Results.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(f"{file}: not a tau2 results file: {_first_error(exc)}") from exc


class RunSource:
    """The simulations of one input (a results file or a ``bench tau2`` output folder) and its own tasks."""

    def __init__(self, name: str, simulations: list[SimulationRun], tasks: list[Task], skipped: int = 0) -> None:
        self.name = name
        self.simulations = simulations
        self.tasks = tasks
        self.skipped = skipped


def load_source(path: str | Path, domain: str) -> RunSource:
    """A tau2 results file, or a folder written by ``policyguard bench tau2``; checks the domain."""
    file = Path(path)
    if file.is_dir():
        return _load_run_dir(file, domain)
    results = load_results_file(file)
    found = results.info.environment_info.domain_name if results.info.environment_info is not None else None
    if found is not None and found != domain:
        raise ConfigError(f"{file}: results of the {found!r} domain, not {domain!r} (pass --domain {found})")
    return RunSource(file.name, list(results.simulations), list(results.tasks))


def _load_run_dir(folder: Path, domain: str) -> RunSource:
    """``bench tau2`` output: ``run.json`` and one ``sims/*.json`` per simulation, each holding its dialogue."""
    from tau2.data_model.simulation import RewardInfo, SimulationRun

    from .runner import SPEC_FILE, RunSpec, load_results

    spec_path = folder / SPEC_FILE
    if not spec_path.is_file():
        raise ConfigError(f"{folder}: a folder but no {SPEC_FILE} (not a 'bench tau2' output folder)")
    try:
        spec = RunSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{spec_path}: not a 'bench tau2' run spec: {str(exc).splitlines()[0]}") from exc
    if spec.domain != domain:
        raise ConfigError(
            f"{folder}: a run of the {spec.domain!r} domain, not {domain!r} (pass --domain {spec.domain})"
        )
    sims: list[SimulationRun] = []
    skipped = 0
    for result in load_results(folder):
        if result.simulation is None:  # an infrastructure error, or a run from before dialogues were kept
            skipped += 1
            continue
        try:
            sim = SimulationRun.model_validate(result.simulation)
        except ValidationError as exc:
            raise ConfigError(f"{folder}/{result.key}: not a tau2 simulation: {_first_error(exc)}") from exc
        reward = None if result.reward is None else RewardInfo(reward=result.reward)
        sims.append(sim.model_copy(update={"reward_info": reward, "trial": result.trial}))
    if not sims and skipped:
        raise ConfigError(
            f"{folder}: none of its {skipped} simulation(s) kept its dialogue (infra errors or an old run)"
        )
    return RunSource(folder.name, sims, [], skipped)


# -- gold ------------------------------------------------------------------------


def assistant_actions(task: Task) -> list[Action]:
    criteria = task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    return [a for a in actions if a.requestor == "assistant"]


def is_gold(call: Any, actions: Sequence[Action]) -> bool:
    """Does the tau2 tool call match one of the gold actions (tau2's own comparison)?"""
    return any(action.compare_with_tool_call(call) for action in actions)


def block_kind(decision: Decision) -> BlockKind | None:
    """``read_first`` when the gate blocked only for missing reads, ``hard`` for any other block."""
    if decision.outcome == "allow":
        return None
    not_met = [r for r in decision.requirements if r.status == "NOT_MET"]
    if decision.stage == "gate" and not_met and all((r.evidence or "").startswith(_READ_EVIDENCE) for r in not_met):
        return "read_first"
    return "hard"


# -- the replay ------------------------------------------------------------------


def _reward(sim: SimulationRun) -> float | None:
    info = sim.reward_info
    return None if info is None else float(info.reward)


_LabelKey = tuple[str | None, str, str]  # (file or None for any file, simulation id, "call_id X" / "turn N")


def _label_index(labels: LabelFile | None) -> dict[_LabelKey, CallLabel]:
    index: dict[_LabelKey, CallLabel] = {}
    for n, entry in enumerate(labels.labels if labels is not None else []):
        what = f"call_id {entry.call_id}" if entry.call_id is not None else f"turn {entry.turn}"
        key = (entry.file, entry.simulation, what)
        if key in index:
            raise ConfigError(f"label file: labels.{n} labels simulation {entry.simulation!r} {what} a second time")
        index[key] = entry
    return index


class SimsReplay:
    """Replays results files through one guard."""

    def __init__(
        self,
        domain: str,
        checklist: Checklist,
        guard: CallChecker,
        *,
        config: str,
        tasks: Iterable[Task] = (),
        checklist_name: str = "",
        labels: LabelFile | None = None,
    ) -> None:
        self.domain = domain
        self.checklist = checklist
        self.guard = guard
        self.config = config
        self.checklist_name = checklist_name
        self.gold: dict[str, list[Action]] = {str(t.id): assistant_actions(t) for t in tasks}
        self.labels = labels
        self._label_index = _label_index(labels)
        self._used_labels: set[_LabelKey] = set()
        self._no_gold: set[str] = set()

    def run(self, paths: Sequence[str | Path], sources: Sequence[RunSource] | None = None) -> SimsReport:
        """Replay every input (``sources`` when already loaded, in the order of ``paths``)."""
        started = time.perf_counter()
        loaded = list(sources) if sources is not None else [load_source(p, self.domain) for p in paths]
        calls: list[SimCall] = []
        sims = rewarded = skipped = 0
        for source in loaded:
            file_tasks = {str(t.id): assistant_actions(t) for t in source.tasks}
            skipped += source.skipped
            for sim in source.simulations:
                sims += 1
                reward = _reward(sim)
                rewarded += reward == 1.0
                calls += self.replay_simulation(source.name, sim, reward, file_tasks)
        self._check_labels_used()
        return SimsReport(
            domain=self.domain,
            config=self.config,
            checklist=self.checklist_name,
            files=[str(p) for p in paths],
            simulations=sims,
            rewarded=rewarded,
            skipped=skipped,
            tasks_without_gold=sorted(self._no_gold, key=_task_order),
            calls=calls,
            runtime_s=round(time.perf_counter() - started, 3),
        )

    def _actions(self, task_id: str, file_tasks: dict[str, list[Action]]) -> list[Action]:
        if task_id in self.gold:
            return self.gold[task_id]
        if task_id in file_tasks:  # a task the installed tau2 lacks: the results file's own copy
            return file_tasks[task_id]
        self._no_gold.add(task_id)
        return []

    def replay_simulation(
        self, file: str, sim: SimulationRun, reward: float | None, file_tasks: dict[str, list[Action]] | None = None
    ) -> list[SimCall]:
        """The guard's decision on every write of one simulation."""
        task_id = str(sim.task_id)
        actions = self._actions(task_id, file_tasks or {})
        out: list[SimCall] = []
        messages = sim.messages
        for index, message in enumerate(messages):
            if getattr(message, "role", None) != "assistant":
                continue
            writes = [c for c in message.tool_calls or [] if self.checklist.is_mutating(c.name)]
            if not writes:
                continue
            history = to_policyguard(messages[:index])
            turn = message.turn_idx if message.turn_idx is not None else index
            for call in writes:
                decision = self.guard.check(
                    ToolCall(id=call.id, name=call.name, arguments=dict(call.arguments)), history
                )
                out.append(
                    SimCall(
                        file=file,
                        simulation=sim.id,
                        task=task_id,
                        trial=sim.trial,
                        reward=reward,
                        turn=turn,
                        call_id=call.id,
                        tool=call.name,
                        arguments=dict(call.arguments),
                        label=self._label(file, sim.id, call, turn, task_id, actions, reward),
                        outcome=decision.outcome,
                        stage=decision.stage,
                        block_kind=block_kind(decision),
                        not_met=[r.id for r in decision.requirements if r.status == "NOT_MET"],
                        message=None if decision.outcome == "allow" else decision.message,
                    )
                )
        return out

    def _label(
        self, file: str, sim_id: str, call: Any, turn: int, task_id: str, actions: list[Action], reward: float | None
    ) -> Label:
        for what in (f"call_id {call.id}", f"turn {turn}"):
            for key in ((file, sim_id, what), (None, sim_id, what)):
                entry = self._label_index.get(key)
                if entry is not None:
                    self._used_labels.add(key)
                    return "violation" if entry.violation else "compliant"
        if is_gold(call, actions):
            return "contradicting_gold" if self._contradicting(task_id) else "gold"
        return "extra" if reward == 1.0 else "non_gold"

    def _contradicting(self, task_id: str) -> bool:
        return self.domain == "airline" and task_id in POLICY_CONTRADICTING_GOLD

    def _check_labels_used(self) -> None:
        unused = [key for key in self._label_index if key not in self._used_labels]
        if unused:
            file, sim, what = unused[0]
            where = f" in {file}" if file is not None else ""
            more = f" (+{len(unused) - 1} more)" if len(unused) > 1 else ""
            raise ConfigError(f"label file: no write matches simulation {sim!r} {what}{where}{more}")


def _task_order(task_id: str) -> tuple[int, str]:
    return (int(task_id), "") if task_id.isdigit() else (1 << 30, task_id)


# -- the human view --------------------------------------------------------------


def _args(arguments: dict[str, Any], limit: int = 100) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(call: SimCall) -> str:
    trial = "" if call.trial is None else f" trial {call.trial}"
    return f"{call.file} task {call.task}{trial} turn {call.turn}"


def label_rows(report: SimsReport) -> list[tuple[Label, int, int, str]]:
    """(label, writes, blocked, note) for every label present (gold, extra and non_gold always)."""
    rows = []
    for label in LABELS:
        writes = report.count(label)
        if writes == 0 and label not in ("gold", "extra", "non_gold"):
            continue
        blocked = report.count(label, blocked=True)
        note = ""
        if label in ("gold", "contradicting_gold") and blocked:
            note = f"{report.count(label, blocked=True, kind='read_first')} read-first, "
            note += f"{report.count(label, blocked=True, kind='hard')} hard"
        rows.append((label, writes, blocked, note))
    return rows


def render(report: SimsReport, command: str | None = None) -> str:
    lines = [f"PolicyGuard on real agent runs - tau2 {report.domain}, config {report.config}"]
    lines.append(f"checklist: {report.checklist}")
    if command:
        lines.append(f"command:   {command}")
    lines.append(
        f"{report.simulations} simulations ({report.rewarded} with reward 1) in {len(report.files)} file(s); "
        f"every write decided on the recorded dialogue before it, nothing re-executed"
    )
    if report.skipped:
        lines.append(f"skipped: {report.skipped} simulation(s) without a recorded dialogue (infrastructure errors)")
    lines.append("")
    width = max(len(label) for label in LABELS)
    lines.append(f"  {'label':<{width}}  writes  blocked")
    for label, writes, blocked, note in label_rows(report):
        row = f"  {label:<{width}}  {writes:>6}  {blocked:>7}"
        lines.append(f"{row}  ({note})" if note else row)
    total_blocked = sum(1 for c in report.calls if c.blocked)
    lines.append(f"  {'total':<{width}}  {len(report.calls):>6}  {total_blocked:>7}")
    lines.append(f"  {GOLD_RULE}.")
    lines.append(f"  {NON_GOLD_NOTE}.")
    if report.tasks_without_gold:
        lines.append(
            f"  tasks with no gold actions found (all their writes are extra/non_gold): {report.tasks_without_gold}"
        )
    lines.append("")

    by_req = report.by_requirement()
    lines.append("Requirements that blocked (blocked writes in which each was NOT_MET, by label)")
    if not by_req:
        lines.append("  none")
    for rid, n in by_req.items():
        per = Counter(c.label for c in report.calls if c.blocked and rid in (c.not_met or [f"<{c.stage}>"]))
        detail = ", ".join(f"{label} {per[label]}" for label in LABELS if per[label])
        lines.append(f"  {rid}: {n}  ({detail})")
    lines.append("")

    for label, title in (("gold", "Blocked gold writes"), ("contradicting_gold", "Blocked contradicting gold")):
        stopped = [c for c in report.calls if c.label == label and c.blocked]
        if label == "contradicting_gold" and not stopped:
            continue
        head = "the guard's cost on these runs" if label == "gold" else "gold that contradicts the written policy"
        lines.append(f"{title} ({head}): {len(stopped)}")
        for kind, what in (
            ("read_first", "read first - a remediation the agent could follow (make the read, retry)"),
            ("hard", "hard refusals"),
        ):
            group = [c for c in stopped if c.block_kind == kind]
            if not group:
                continue
            lines.append(f"  {what}: {len(group)}")
            for call in group:
                lines.append(f"    {_where(call)}: {call.tool}({_args(call.arguments)})")
                lines.append(f"      not met: {', '.join(call.not_met) or call.stage}")
                lines.append(f"      remediation: {(call.message or '').strip()[:400]}")
        if label == "contradicting_gold":
            for task in sorted({c.task for c in stopped}, key=_task_order):
                lines.append(f"  task {task}: {POLICY_CONTRADICTING_GOLD.get(task, '')}")
        lines.append("")
    lines.append(f"replay time: {report.runtime_s:.1f} s (guard decisions; loading the files not included)")
    return "\n".join(lines)


def markdown_table(report: SimsReport) -> str:
    """The per-label table and the blocking requirements as markdown (for ``bench report``)."""
    out = ["## Real agent runs replayed through the guard (bench sims)", ""]
    out.append(
        f"{report.simulations} simulations ({report.rewarded} with reward 1), config {report.config}, "
        f"checklist {report.checklist}. {NON_GOLD_NOTE}."
    )
    out.append("")
    out.append("| label | writes | blocked | note |")
    out.append("|---|---|---|---|")
    for label, writes, blocked, note in label_rows(report):
        out.append(f"| {label} | {writes} | {blocked} | {note} |")
    out.append("")
    by_req = report.by_requirement()
    if by_req:
        out.append("| requirement (NOT_MET in blocked writes) | writes |")
        out.append("|---|---|")
        out += [f"| {rid} | {n} |" for rid, n in by_req.items()]
        out.append("")
    return "\n".join(out)


# -- one call to do it all ---------------------------------------------------------


def replay_results(
    paths: Sequence[str | Path],
    *,
    domain: str,
    checklist: Checklist,
    guard: CallChecker,
    config: str,
    checklist_name: str = "",
    labels: LabelFile | None = None,
) -> SimsReport:
    """Load the domain's tasks from tau2 and replay ``paths`` (results files or bench tau2 folders)."""
    from .domain import DomainData

    data = DomainData.load(domain)
    replay = SimsReplay(
        domain,
        checklist,
        guard,
        config=config,
        tasks=data.tasks,
        checklist_name=checklist_name,
        labels=labels,
    )
    return replay.run(paths)
