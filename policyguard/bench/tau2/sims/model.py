"""What ``bench sims`` reports, and the per-call label file it reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from policyguard.errors import ConfigError

from .excluded import Exclusion
from .metric import SET_APART, CountedAs, figures

Label = Literal["gold", "contradicting_gold", "extra", "non_gold", "violation", "compliant"]
LABELS: tuple[Label, ...] = ("gold", "contradicting_gold", "extra", "non_gold", "violation", "compliant")
BlockKind = Literal["read_first", "hard"]
COMPLIANT: frozenset[str] = frozenset({"gold", "extra", "compliant"})
BLOCK_CLASSES: dict[str, str] = {
    "reused-id": "the call id was used before in a way that cannot be paired",
    "stale-fact": "a fact was invalidated by an earlier write and must be read again",
    "authentication": "no user was authenticated, or the record is another user's",
    "certificate": "a compensation rule",
    "repeat": "the same write was already executed in this simulation",
    "read-first": "evidence the checks need was never read",
    "policy": "a formal check of the written policy is false",
    "unknown-tool": "the checklist does not name the tool",
    "verifier": "the verifier blocked it",
}

GOLD_RULE = (
    "gold = same tool and arguments as one of the task's gold assistant actions, compared as tau2's evaluator "
    "compares actions (Action.compare_with_tool_call: the arguments the call passes, or only the action's "
    "compare_args when set, must be equal)"
)
NON_GOLD_NOTE = (
    "non_gold is not the same as a policy violation: a failed simulation's writes are often wrong choices "
    "the policy allows (pass --labels with true per-call labels to count violations)"
)


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
        raise ConfigError(f"{file}: not a label file: {first_error(exc)}") from exc


# -- the report ------------------------------------------------------------------


class ExcludedTask(Exclusion):
    """An excluded task (see :mod:`.excluded`) met in the replayed runs, and how many simulations played it."""

    task: str
    simulations: int


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
    block_class: str | None = Field(default=None, description="Why it was blocked, by class (see BLOCK_CLASSES).")
    not_met: list[str] = Field(default_factory=list)
    message: str | None = None
    recorded_error: bool | None = Field(
        default=None, description="The run's own result for this write was an error (the tool refused it too)."
    )
    counted_as: CountedAs = Field(
        description="In the settled rate (compliant), not a compliant write (not_compliant), or set apart: "
        "excluded_task, env_refused, repeat (see SETTLED_RULE)."
    )
    fetched: list[str] = Field(
        default_factory=list,
        description="Reads the guard made itself through the environment's tools for this decision (--fetch).",
    )
    recorded_task: str | None = Field(
        default=None,
        description="The results file's task id when it is not the task tau2 evaluated the simulation against "
        "(``task`` is then that task, found from the reward's action checks, or 'unknown').",
    )

    @property
    def blocked(self) -> bool:
        return self.outcome != "allow"

    @property
    def compliant(self) -> bool:
        """Counted as a write the guard should let through: gold, extra, or labelled compliant."""
        return self.label in COMPLIANT


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
    retasked: int = Field(
        default=0,
        description="Simulations whose recorded task id is not the task tau2 evaluated them against "
        "(their writes carry recorded_task).",
    )
    excluded: list[ExcludedTask] = Field(default_factory=list)
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

    def compliant_by_class(self) -> dict[str, dict[str, int]]:
        """Block class -> {"blocked", "hard", "refused_by_tool"} over blocked compliant writes."""
        out: dict[str, dict[str, int]] = {}
        for call in self.calls:
            if not (call.compliant and call.blocked):
                continue
            row = out.setdefault(call.block_class or "policy", {"blocked": 0, "hard": 0, "refused_by_tool": 0})
            row["blocked"] += 1
            row["hard"] += call.block_kind == "hard"
            row["refused_by_tool"] += bool(call.recorded_error)
        return dict(sorted(out.items(), key=lambda kv: (-kv[1]["blocked"], kv[0])))

    def rates(self) -> dict[str, Any]:
        """The raw and the settled figures, what was set apart (by reason) and the excluded tasks met."""
        raw = [c for c in self.calls if c.compliant]
        return {
            "raw": figures(raw),
            "settled": figures([c for c in raw if c.counted_as == "compliant"]),
            "set_apart": {reason: figures([c for c in raw if c.counted_as == reason]) for reason in SET_APART},
            "excluded_tasks": [
                {
                    **row.model_dump(),
                    **figures([c for c in self.calls if c.counted_as == "excluded_task" and c.task == row.task]),
                }
                for row in self.excluded
            ],
            "retasked_simulations": self.retasked,
        }

    def summary(self) -> dict[str, Any]:
        compliant = [c for c in self.calls if c.compliant]
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
            "contradicting_gold_writes": self.count("contradicting_gold"),
            "contradicting_gold_blocked": self.count("contradicting_gold", blocked=True),
            "violation_writes": self.count("violation"),
            "violation_blocked": self.count("violation", blocked=True),
            "compliant_writes": len(compliant),
            "compliant_blocked": sum(c.blocked for c in compliant),
            "compliant_blocked_hard": sum(c.blocked and c.block_kind == "hard" for c in compliant),
            "compliant_blocked_by_class": self.compliant_by_class(),
            "seconds": self.runtime_s,
            "by_requirement": self.by_requirement(),
            **self.rates(),
            "calls": [c.model_dump(mode="json") for c in self.calls],
        }


def first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"
