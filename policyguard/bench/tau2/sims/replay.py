"""The replay itself: each write of a real run decided by the guard on the dialogue before it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.errors import ConfigError
from policyguard.trajectory.canonical import canonical_json
from policyguard.trajectory.messages import ToolCall

from ..agent import call_by_call, recorded_answers
from ..domain import to_policyguard
from ..domains.airline.labels import POLICY_CONTRADICTING_GOLD
from ..guarding import CallChecker
from .excluded import Exclusion, excluded_tasks
from .fetch import RecordedEnvironment
from .load import RunSource, load_source
from .metric import counted_as
from .model import COMPLIANT, BlockKind, CallLabel, ExcludedTask, Label, LabelFile, SimCall, SimsReport
from .tasks import UNKNOWN_TASK, action_owners, played_tasks

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.simulation import SimulationRun
    from tau2.data_model.tasks import Action, Task

    from ..domain import DomainData

_READ_EVIDENCE = ("missing fact", "missing principal", "prerequisite read not made")


# -- gold ------------------------------------------------------------------------


def assistant_actions(task: Task) -> list[Action]:
    criteria = task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    return [a for a in actions if a.requestor == "assistant"]


def is_gold(call: Any, actions: Sequence[Action]) -> bool:
    """Does the tau2 tool call match one of the gold actions (tau2's own comparison)?"""
    return any(action.compare_with_tool_call(call) for action in actions)


def unused_gold(call: Any, actions: Sequence[Action], used: set[int]) -> int | None:
    """The first gold action the call matches that no earlier write used up (gold is matched one to one)."""
    return next((i for i, a in enumerate(actions) if i not in used and a.compare_with_tool_call(call)), None)


def block_class(decision: Decision, kind: BlockKind | None, repeat: bool) -> str | None:
    """The class of a block, for the table of blocked compliant writes (see ``BLOCK_CLASSES``)."""
    if decision.outcome == "allow":
        return None
    message = decision.message or ""
    not_met = [r.id for r in decision.requirements if r.status == "NOT_MET"]
    if decision.stage == "bad_call":
        return "reused-id"
    if repeat:
        return "repeat"
    if "changed the" in message and "after it was read" in message:
        return "stale-fact"
    if "authenticate" in message:
        return "authentication"
    if any(rid.startswith("certificate-") for rid in not_met):
        return "certificate"
    if kind == "read_first":
        return "read-first"
    if decision.stage == "unknown_tool":
        return "unknown-tool"
    return "verifier" if decision.stage.startswith("verifier") else "policy"


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
        excluded: Mapping[str, Exclusion] | None = None,
        fetch_from: DomainData | None = None,
    ) -> None:
        self.domain = domain
        self.fetch_from = fetch_from  # the environment the guard reads through (None: no fetching)
        self.checklist = checklist
        self.guard = guard
        self.config = config
        self.checklist_name = checklist_name
        self.tasks = list(tasks)
        self.gold: dict[str, list[Action]] = {str(t.id): assistant_actions(t) for t in self.tasks}
        self.excluded = dict(excluded_tasks(domain) if excluded is None else excluded)
        self.labels = labels
        self._label_index = _label_index(labels)
        self._used_labels: set[_LabelKey] = set()
        self._no_gold: set[str] = set()

    def run(self, paths: Sequence[str | Path], sources: Sequence[RunSource] | None = None) -> SimsReport:
        """Replay every input (``sources`` when already loaded, in the order of ``paths``)."""
        started = time.perf_counter()
        loaded = list(sources) if sources is not None else [load_source(p, self.domain) for p in paths]
        calls: list[SimCall] = []
        sims = rewarded = skipped = retasked = 0
        excluded_sims: Counter[str] = Counter()
        for source in loaded:
            file_tasks = {str(t.id): assistant_actions(t) for t in source.tasks}
            played = played_tasks(source.simulations, action_owners(self.tasks, source.tasks))
            skipped += source.skipped
            for sim, task in zip(source.simulations, played, strict=True):
                sims += 1
                reward = _reward(sim)
                rewarded += reward == 1.0
                retasked += task != str(sim.task_id)
                if task in self.excluded:
                    excluded_sims[task] += 1
                calls += self.replay_simulation(source.name, sim, reward, file_tasks, task=task)
        self._check_labels_used()
        return SimsReport(
            domain=self.domain,
            config=self.config,
            checklist=self.checklist_name,
            files=[str(p) for p in paths],
            simulations=sims,
            rewarded=rewarded,
            skipped=skipped,
            tasks_without_gold=sorted(self._no_gold, key=task_order),
            retasked=retasked,
            excluded=[
                ExcludedTask(task=task, simulations=n, **self.excluded[task].model_dump())
                for task, n in sorted(excluded_sims.items(), key=lambda kv: task_order(kv[0]))
            ],
            calls=calls,
            runtime_s=round(time.perf_counter() - started, 3),
        )

    def _actions(self, task_id: str, file_tasks: dict[str, list[Action]]) -> list[Action]:
        if task_id == UNKNOWN_TASK:
            return []
        if task_id in self.gold:
            return self.gold[task_id]
        if task_id in file_tasks:  # a task the installed tau2 lacks: the results file's own copy
            return file_tasks[task_id]
        self._no_gold.add(task_id)
        return []

    def replay_simulation(
        self,
        file: str,
        sim: SimulationRun,
        reward: float | None,
        file_tasks: dict[str, list[Action]] | None = None,
        *,
        task: str | None = None,
    ) -> list[SimCall]:
        """The guard's decision on every write of one simulation (``task``: the one it played, default its id)."""
        task_id = str(sim.task_id) if task is None else task
        recorded_task = None if task_id == str(sim.task_id) else str(sim.task_id)
        actions = self._actions(task_id, file_tasks or {})
        out: list[SimCall] = []
        executed: set[str] = set()  # writes of this simulation that ran (a result that is not an error)
        used_gold: set[int] = set()  # gold actions a write that ran has matched (one to one)
        messages = sim.messages
        env = None
        if self.fetch_from is not None:
            task_obj = next((t for t in self.tasks if str(t.id) == task_id), None)
            env = RecordedEnvironment(self.fetch_from, task_obj, messages)
        for index, message in enumerate(messages):
            if getattr(message, "role", None) != "assistant":
                continue
            calls = list(message.tool_calls or [])
            if not any(self.checklist.is_mutating(c.name) for c in calls):
                continue
            before = to_policyguard(messages[:index])
            answers = recorded_answers(messages[index + 1 :])
            turn = message.turn_idx if message.turn_idx is not None else index
            for position, call in enumerate(calls):
                if not self.checklist.is_mutating(call.name):
                    continue
                # Judged as GuardedAgent runs a batch live: after the earlier calls of the message ran
                # (their recorded results), with this call pending as the newest of the message.
                history = call_by_call(before, message.content, calls[: position + 1], answers)
                pending = ToolCall(id=call.id, name=call.name, arguments=dict(call.arguments))
                fetched: list[str] = []
                if env is None:
                    decision = self.guard.check(pending, history)
                else:
                    fetcher = _Counting(env.before(index, position), fetched)
                    decision = self.guard.check(pending, history, fetch=fetcher)  # type: ignore[call-arg]
                kind = block_kind(decision)
                not_met = [r.id for r in decision.requirements if r.status == "NOT_MET"]
                answer = answers.get(call.id)
                refused = answer is not None and answer.is_error
                key = _write_key(call)
                repeat = key in executed
                matched = is_gold(call, actions)
                gold = unused_gold(call, actions, used_gold) if matched else None
                if not refused:
                    executed.add(key)
                    used_gold.update(() if gold is None else (gold,))
                label = self._label(file, sim.id, call, turn, task_id, matched, reward)
                counted = counted_as(
                    compliant=label in COMPLIANT,
                    excluded=task_id in self.excluded,
                    refused=refused,
                    repeat=gold is None if matched else repeat,  # gold one to one, any other write once
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
                        label=label,
                        outcome=decision.outcome,
                        stage=decision.stage,
                        block_kind=kind,
                        block_class=block_class(decision, kind, repeat),
                        not_met=not_met,
                        message=None if decision.outcome == "allow" else decision.message,
                        recorded_error=None if answer is None else answer.is_error,
                        counted_as=counted,
                        recorded_task=recorded_task,
                        fetched=fetched,
                    )
                )
        return out

    def _label(
        self, file: str, sim_id: str, call: Any, turn: int, task_id: str, matched: bool, reward: float | None
    ) -> Label:
        for what in (f"call_id {call.id}", f"turn {turn}"):
            for key in ((file, sim_id, what), (None, sim_id, what)):
                entry = self._label_index.get(key)
                if entry is not None:
                    self._used_labels.add(key)
                    return "violation" if entry.violation else "compliant"
        if matched:
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


class _Counting:
    """A fetcher that notes each read it makes (``tool(arguments)``) in ``made``."""

    def __init__(self, inner: Any, made: list[str]) -> None:
        self._inner, self._made = inner, made

    def __call__(self, tool: str, arguments: dict[str, Any]) -> Any:
        self._made.append(f"{tool}({canonical_json(arguments)})")
        return self._inner(tool, arguments)


def _write_key(call: Any) -> str:
    """A write as text, to tell a repeat of it (arguments that cannot be canonical compare by repr)."""
    try:
        return canonical_json({"tool": call.name, "arguments": call.arguments})
    except (TypeError, ValueError, RecursionError):
        return repr((call.name, call.arguments))


def task_order(task_id: str) -> tuple[int, str]:
    return (int(task_id), "") if task_id.isdigit() else (1 << 30, task_id)


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
    from ..domain import DomainData

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
